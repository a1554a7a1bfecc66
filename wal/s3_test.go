package wal

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// The log's conditional writes against a real S3 server: the lease is
// created, refused to a second writer, renewed with If-Match, taken over when
// expired, released; records are created once and never overwritten.
func TestS3(t *testing.T) {
	ctx := context.Background()
	st := s3test.NewStore(t)
	const prefix = testPrefix
	a, err := Open(ctx, st, prefix, Options{Tag: 5, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	seqs := make([]uint64, 16)
	for i := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := a.Append(ctx, []Op{{Kind: OpWrite, Off: int64(i) * 10, Data: []byte("0123456789")}})
			if err != nil {
				t.Error(err)
			}
			seqs[i] = seq
		}()
	}
	wg.Wait()
	if _, err := Open(ctx, st, prefix, Options{Tag: 5}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second writer: %v, want ErrBusy", err)
	}
	time.Sleep(1300 * time.Millisecond) // past the TTL: renewals keep it (a TTL of a second: a loaded machine delays a renewal by a few hundred ms)
	if _, err := Open(ctx, st, prefix, Options{Tag: 5}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second writer after a renewal: %v, want ErrBusy", err)
	}
	found, err := List(ctx, st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ops := 0
	for _, s := range found {
		r, err := ReadRecord(ctx, st, prefix, 5, s)
		if err != nil {
			t.Fatal(err)
		}
		ops += len(r.Ops)
	}
	if ops != len(seqs) {
		t.Fatalf("%d ops in %d records, want %d", ops, len(found), len(seqs))
	}
	if _, err := a.Append(ctx, []Op{{Kind: OpMtime, MtimeNs: 1}}); err != nil {
		t.Fatal(err)
	}
	a.Covered(a.Last())
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := List(ctx, st, prefix); err != nil || len(left) != 0 {
		t.Fatalf("records left after Close: %v %v", left, err)
	}
	b, err := Open(ctx, st, prefix, Options{Tag: 5, Next: a.Last() + 1})
	if err != nil {
		t.Fatalf("after the first writer closed: %v", err)
	}
	b.Abandon() // as if crashed: its lease stays until it expires
	if _, err := Open(ctx, st, prefix, Options{Tag: 5}); !errors.Is(err, ErrBusy) {
		// This process is alive: only the expiry frees it.
		t.Fatalf("open over an abandoned, unexpired lease: %v, want ErrBusy", err)
	}
	putOwner(t, st, encodeOwner(OwnerInfo{Writer: "gone", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Second)}))
	c, err := Open(ctx, st, prefix, Options{Tag: 5})
	if err != nil {
		t.Fatalf("taking over an expired lease: %v", err)
	}
	// Two writers past a lease cannot overwrite each other's records.
	seq, err := c.Append(ctx, []Op{{Kind: OpTruncate, Off: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, RecordKey(prefix, seq+1), []byte("x"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, []Op{{Kind: OpTruncate, Off: 2}}); !errors.Is(err, ErrTaken) {
		t.Fatalf("append over a record another writer made: %v, want ErrTaken", err)
	}
	c.Close(ctx)
}

// Taking a lease back against a real S3 server: created again (If-None-Match)
// after an opener that took it during an outage let it go, replaced
// (If-Match) when a stale owner is left on it, and lost for good once
// another writer appended.
func TestS3TakeBack(t *testing.T) {
	ctx := context.Background()
	raw := s3test.NewStore(t)
	faults := faulty.New(raw, 1)
	const ttl = 300 * time.Millisecond
	a, err := Open(ctx, faults, testPrefix, Options{Tag: 5, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	op := Op{Kind: OpMtime, MtimeNs: 1}
	if _, err := a.Append(ctx, []Op{op}); err != nil {
		t.Fatal(err)
	}
	ours := func() bool {
		b, _, err := raw.Get(ctx, ownerKey, staging.Whole())
		o, perr := parseOwner(b)
		return err == nil && perr == nil && o.Writer == a.lease.id && time.Now().Before(o.Expires)
	}

	// 1. An outage; another opener takes the expired lease and lets it go.
	outage := faults.Add(faulty.Rule{Op: staging.OpAny, KeyPrefix: ownerKey, Kind: faulty.Error})
	waitFor(t, "the lease to expire", func() bool { return time.Now().After(readOwner(t, raw).Expires) })
	b, err := Open(ctx, raw, testPrefix, Options{Tag: 5, LeaseTTL: ttl})
	if err != nil {
		t.Fatalf("take over the expired lease: %v", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	faults.Remove(outage)
	waitFor(t, "the lease created again", ours)
	if _, err := a.Append(ctx, []Op{op}); err != nil {
		t.Fatalf("append after the lease was taken back: %v", err)
	}

	// 2. A stale owner left on it: replaced.
	putOwner(t, raw, encodeOwner(OwnerInfo{Writer: "gone", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Second)}))
	waitFor(t, "the stale owner replaced", ours)
	if _, err := a.Append(ctx, []Op{op}); err != nil {
		t.Fatalf("append after the lease was taken back: %v", err)
	}

	// 3. Another writer appended: lost for good.
	putOwner(t, raw, encodeOwner(OwnerInfo{Writer: "gone", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Second)}))
	if _, err := raw.Put(ctx, RecordKey(testPrefix, a.Last()+10), Encode(5, Record{Seq: a.Last() + 10, Ops: []Op{op}}), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease lost for good", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.lostFinal
	})
	if _, err := a.Append(ctx, []Op{op}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("append after another writer appended: %v, want ErrLeaseLost", err)
	}
	if o := readOwner(t, raw); o.Writer != "gone" {
		t.Fatalf("owner %+v, want the other writer's left alone", o)
	}
}
