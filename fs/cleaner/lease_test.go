package cleaner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine/fakeclock"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func acquire(t *testing.T, l *cleaner.Lease) bool {
	t.Helper()
	ok, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// Two contenders: the first takes the free lease, the second does not while
// the holder renews it, takes it once it has gone unrenewed for its TTL on
// the second's clock, and at once when the holder lets it go. The old
// holder's fence and renewal fail from then on.
func TestLeaseTwoContenders(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	clk := fakeclock.New()
	const ttl = time.Minute
	a := cleaner.NewLease(st, "", ttl, clk.Now)
	b := cleaner.NewLease(st, "", ttl, clk.Now)
	if !acquire(t, a) {
		t.Fatal("a did not take a free lease")
	}
	if acquire(t, b) {
		t.Fatal("b took a held lease")
	}
	for range 5 {
		clk.Advance(ttl / 2)
		if !acquire(t, a) { // renews
			t.Fatal("a lost a lease it renewed")
		}
		if acquire(t, b) {
			t.Fatal("b took a lease renewed within its TTL")
		}
	}
	if err := a.Check(ctx); err != nil {
		t.Fatalf("holder's fence: %v", err)
	}
	clk.Advance(ttl - time.Second)
	if acquire(t, b) {
		t.Fatal("b took the lease before its TTL passed unrenewed")
	}
	if err := a.Check(ctx); err != nil {
		t.Fatalf("holder's fence within the TTL: %v", err)
	}
	clk.Advance(time.Second)
	if err := a.Check(ctx); !errors.Is(err, cleaner.ErrLeaseLost) {
		t.Fatalf("holder's fence past its TTL unrenewed: %v; want ErrLeaseLost", err)
	}
	if !acquire(t, b) {
		t.Fatal("b did not take a lease unrenewed for its TTL")
	}
	if err := a.Renew(ctx); !errors.Is(err, cleaner.ErrLeaseLost) {
		t.Fatalf("old holder's renewal: %v; want ErrLeaseLost", err)
	}
	if acquire(t, a) {
		t.Fatal("a took back b's lease")
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !acquire(t, a) {
		t.Fatal("a did not take a lease let go")
	}
	// Within its TTL on its own clock, the holder's fence still finds the
	// lease replaced (a contender whose clock runs faster).
	if _, err := st.Put(ctx, volume.GCLeaseKey(""), []byte(`{"version":1,"holder":"c"}`), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(ctx); !errors.Is(err, cleaner.ErrLeaseLost) {
		t.Fatalf("holder's fence on a lease replaced: %v; want ErrLeaseLost", err)
	}
}

// A malformed lease is waited out, not taken at once, and a lease's
// fields are checked.
func TestLeaseMalformed(t *testing.T) {
	for _, tc := range []struct{ body, err string }{
		{`{`, "malformed"},
		{`{"version":0}`, "version 0"},
		{`{"version":1,"stored_bytes":-1}`, "negative"},
		{`{"version":1,"holder":"` + strings.Repeat("a", 65) + `"}`, "too long"},
	} {
		if _, _, _, err := cleaner.DecodeLease([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("DecodeLease(%s) = %v; want an error saying %q", tc.body, err, tc.err)
		}
	}
	if _, ttl, _, err := cleaner.DecodeLease([]byte(`{"version":1,"ttl_ms":99999999999}`)); err != nil || ttl != time.Hour {
		t.Errorf("a lease's TTL of years reads as %v, %v; want an hour", ttl, err)
	}
	ctx := context.Background()
	st := mem.New()
	if _, err := st.Put(ctx, volume.GCLeaseKey(""), []byte("junk"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New()
	l := cleaner.NewLease(st, "", time.Minute, clk.Now)
	if acquire(t, l) {
		t.Fatal("a malformed lease was taken at once")
	}
	clk.Advance(time.Minute)
	if !acquire(t, l) {
		t.Fatal("a malformed lease was not taken once waited out")
	}
}

// fenceStore lets a hook run before each deletion.
type fenceStore struct {
	staging.Store
	before func(key string)
}

func (s *fenceStore) Delete(ctx context.Context, key string) error {
	s.before(key)
	return s.Store.Delete(ctx, key)
}

// A slow holder whose lease was taken stops before its next batch of
// deletions: a cleaner takes the lease while the first one's run deletes,
// and the first deletes no file's objects after that.
func TestLeaseFencesSlowHolder(t *testing.T) {
	ctx := context.Background()
	raw := mem.New()
	ns, err := namespace.Open(ctx, raw, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		n, err := ns.Create(ctx, namespace.RootIno, "f"+string(rune('a'+i)), 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		writeHistory(t, raw, n.FileID, params(segment.FormatStream, false), 4, uint64(i))
	}
	ns.Close()
	clk := fakeclock.New()
	const ttl = time.Minute
	slow := cleaner.NewLease(raw, "", ttl, clk.Now)
	if !acquire(t, slow) {
		t.Fatal("no lease")
	}
	other := cleaner.NewLease(raw, "", ttl, clk.Now)
	if acquire(t, other) {
		t.Fatal("took a held lease")
	}
	var taken atomic.Bool
	var files map[string]bool
	var after atomic.Int32
	st := &fenceStore{Store: raw}
	st.before = func(key string) {
		id, _, _ := volume.SplitFileKey(volume.FilesPrefix(""), key)
		if taken.Load() {
			if !files[id] {
				after.Add(1)
			}
			return
		}
		// The holder stalls past its TTL in its first deletion, and
		// the other contender takes the lease meanwhile.
		clk.Advance(ttl)
		if !acquire(t, other) {
			t.Error("the other contender did not take the lease of a stalled holder")
		}
		files = map[string]bool{id: true}
		taken.Store(true)
	}
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Fence: slow.Check})
	if !errors.Is(err, cleaner.ErrFenced) || !errors.Is(err, cleaner.ErrLeaseLost) {
		t.Fatalf("the slow holder's run ended with %v; want its fence's ErrLeaseLost", err)
	}
	if !taken.Load() {
		t.Fatal("the run deleted nothing")
	}
	if n := after.Load(); n != 0 {
		t.Fatalf("the slow holder deleted %d objects of other files after its lease was taken (report: %d deleted)", n, len(rep.Deleted))
	}
}

func FuzzDecodeLease(f *testing.F) {
	f.Add([]byte(`{"version":1,"holder":"ab","ttl_ms":60000,"cursor":"c","stored_objects":3,"stored_bytes":9,"stored_at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"version":1,"ttl_ms":-5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		holder, ttl, s, err := cleaner.DecodeLease(b)
		if err != nil {
			return
		}
		if ttl < time.Second || ttl > time.Hour {
			t.Fatalf("TTL %v outside its bounds", ttl)
		}
		if s.StoredBytes < 0 || s.StoredObjects < 0 || len(holder) > 64 || len(s.Cursor) > 1024 {
			t.Fatalf("decoded out of bounds: %q %+v", holder, s)
		}
	})
}

// A holder that writes its lease once an interval (its passes), late by up
// to half an interval, keeps it from a contender that looks once an
// interval: with the TTL of LeaseTTLFor the contender always finds it
// changed. With a TTL of a minute and passes every 5 minutes the contender
// takes it from the live holder.
func TestLeaseIntervalTTL(t *testing.T) {
	const interval = 5 * time.Minute
	for _, tc := range []struct {
		ttl   time.Duration
		taken bool
	}{{cleaner.LeaseTTLFor(interval), false}, {time.Minute, true}} {
		st := mem.New()
		clk := fakeclock.New()
		a := cleaner.NewLease(st, "", tc.ttl, clk.Now)
		b := cleaner.NewLease(st, "", tc.ttl, clk.Now)
		if !acquire(t, a) {
			t.Fatal("no lease")
		}
		taken := false
		// a's writes at k*interval + late, b's looks at k*interval + 1s.
		lates := []time.Duration{0, interval / 2, 0, interval / 3, interval / 2, 0, interval / 2, interval / 2}
		at := time.Duration(0)
		for k, late := range lates {
			look := time.Duration(k)*interval + time.Second
			write := time.Duration(k)*interval + late
			for _, ev := range []struct {
				at    time.Duration
				write bool
			}{{min(look, write), write < look}, {max(look, write), write >= look}} {
				clk.Advance(ev.at - at)
				at = ev.at
				if ev.write {
					a.Acquire(context.Background())
				} else if acquire(t, b) {
					taken = true
				}
			}
		}
		if taken != tc.taken {
			t.Errorf("TTL %v: the contender took the live holder's lease: %v; want %v", tc.ttl, taken, tc.taken)
		}
	}
}
