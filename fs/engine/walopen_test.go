package engine

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// listHookStore runs hook once, before the first listing of the log after
// the skip listings it lets through.
type listHookStore struct {
	staging.Store
	once sync.Once
	hook func()
	skip atomic.Int32
}

func (s *listHookStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	if strings.Contains(prefix, wal.Dir) && s.skip.Add(-1) < 0 {
		s.once.Do(s.hook)
	}
	return s.Store.List(ctx, prefix, startAfter, max)
}

// publishAndWait makes the live writer a publish and waits until its
// records are deleted from st: whether that happened (an error is reported
// on t otherwise).
func publishAndWait(t *testing.T, a *File, st staging.Store, prefix string) bool {
	ctx := context.Background()
	if err := a.Sync(ctx); err != nil {
		t.Errorf("sync: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if seqs, err := wal.List(ctx, st, prefix); err == nil && len(seqs) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Error("the writer's records were not deleted after its publish")
			return false
		}
	}
}

// The live writer publishes, and deletes its records, after a reader read
// the head and before it lists the log: the reader finds no record past the
// head it read, reads the head again and shows the writer's checkpoint, and
// so does ViewWAL. (An open through another mount, in the campaign, showed
// an acknowledged write's file empty.)
func TestWALOpenWriterPublishedBeforeListing(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "pl"}
	a, err := Create(ctx, st, "pl/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, view := range []bool{false, true} {
		if _, err := a.WriteAt(ctx, bytes.Repeat([]byte{'v'}, 7743), a.Size()); err != nil {
			t.Fatal(err)
		}
		want := readAll(t, a)
		published := false
		hs := &listHookStore{Store: st, hook: func() {
			published = publishAndWait(t, a, st, "pl/")
		}}
		if view {
			v, err := ViewWAL(ctx, hs, "pl/", o)
			if err != nil || v.Size != int64(len(want)) {
				t.Fatalf("ViewWAL while the writer publishes: size %d, %v; want %d", v.Size, err, len(want))
			}
		} else {
			b, err := Open(ctx, hs, "pl/", o)
			if err != nil {
				t.Fatalf("open while the writer publishes: %v", err)
			}
			if got := readAll(t, b); !bytes.Equal(got, want) {
				t.Fatalf("reader: %d bytes; want the writer's %d", len(got), len(want))
			}
			b.Close()
		}
		if !published {
			t.Fatal("the writer did not publish between the head and the listing")
		}
	}
}

// The same between a refresh's look at the head and its look at the log:
// a reader that holds the file open and opens it again (close-to-open)
// shows the writer's checkpoint. And between its two looks at the log: the
// first (wal.After) finds a record past what the reader shows, and before
// the listing that would read it the writer publishes and deletes it; the
// listing has nothing past the head the reader looked at, the head has
// moved and is read again. (An open through another mount right after a
// WAL writer's fsync, in the campaign, showed the file without its
// fallocate.)
func TestWALRefreshWriterPublishedBeforeListing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		skip   int32 // looks at the log before the one the publish precedes
		change func(ctx context.Context, a *File) error
	}{
		{"before the first look", 0, func(ctx context.Context, a *File) error {
			_, err := a.WriteAt(ctx, bytes.Repeat([]byte{'w'}, 7743), 5)
			return err
		}},
		{"between the looks", 1, func(ctx context.Context, a *File) error {
			return a.ZeroRange(ctx, 3000, 2000, true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			o := Options{Params: walParams(segment.FormatStream), FileID: "pr"}
			a, err := Create(ctx, st, "pr/", o)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if _, err := a.WriteAt(ctx, bytes.Repeat([]byte{'f'}, 9000), 0); err != nil {
				t.Fatal(err)
			}
			published := false
			hs := &listHookStore{Store: st, hook: func() {}}
			b, err := Open(ctx, hs, "pr/", o)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := tc.change(ctx, a); err != nil {
				t.Fatal(err)
			}
			want := readAll(t, a)
			hs.once = sync.Once{}
			hs.skip.Store(tc.skip)
			hs.hook = func() {
				published = publishAndWait(t, a, st, "pr/")
			}
			if _, err := b.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if !published {
				t.Fatal("the writer did not publish where the test put it")
			}
			if got := readAll(t, b); !bytes.Equal(got, want) {
				t.Fatalf("reader after refresh: %d bytes, first difference at %d; want the writer's %d", len(got), commonPrefix(got, want), len(want))
			}
		})
	}
}

// The same when the refresh read a new head: the writer publishes again
// and deletes the records after it before the reader looks for them. The
// reader reads the head again instead of showing the head it read without
// the writes logged after it. (An open through another mount, in the
// campaign, showed a WAL writer's checkpoint without its last acknowledged
// write.)
func TestWALRefreshNewHeadThenWriterPublished(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "rl"}
	w, err := Create(ctx, st, "rl/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write := func(off int64, s string) {
		t.Helper()
		if _, err := w.WriteAt(ctx, []byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	write(0, "aaaa")
	publishAndWait(t, w, st, "rl/")
	armed := false
	hooked := &listHookStore{Store: st}
	hooked.hook = func() {
		if armed {
			publishAndWait(t, w, st, "rl/")
		}
	}
	r, err := Open(ctx, st, "rl/", o) // the writer lives: read-only
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.st = hooked // its next listing of the log meets the hook
	write(4, "bb")
	publishAndWait(t, w, st, "rl/")
	write(6, "cc") // logged after the head the reader will read
	armed = true
	if _, err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r); string(got) != "aaaabbcc" {
		t.Fatalf("after the refresh the reader shows %q, want %q (every acknowledged write)", got, "aaaabbcc")
	}
}

// The same gap for ViewWAL (a stat of a file another mount writes with the
// WAL): between its look at the head and at the log the writer publishes a
// truncate, deletes its record and writes again. The later record alone,
// over the head looked at, would give the size before the truncate.
func TestWALViewBetweenPublishAndNextWrite(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "vg"}
	a, err := Create(ctx, st, "vg/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.WriteAt(ctx, []byte("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	if !publishAndWait(t, a, st, "vg/") {
		return
	}
	if err := a.Truncate(ctx, 2); err != nil {
		t.Fatal(err)
	}
	hs := &listHookStore{Store: st, hook: func() {
		publishAndWait(t, a, st, "vg/")
		if _, err := a.WriteAt(ctx, []byte("two"), 3); err != nil {
			t.Errorf("writer: %v", err)
		}
	}}
	v, err := ViewWAL(ctx, hs, "vg/", o)
	if err != nil {
		t.Fatal(err)
	}
	if want := a.Stat().Size; v.Size != want {
		t.Fatalf("ViewWAL: size %d, the writer's %d", v.Size, want)
	}
}
