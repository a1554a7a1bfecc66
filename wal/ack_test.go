package wal

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// lateRecord opens a log whose renewals fail and whose first record's PUT
// lands only once the lease can no longer be proven the log's: it returns
// the log, the owner outage to remove, and the Append's answer to come.
func lateRecord(t *testing.T, st *mem.Store) (*Log, *faulty.Store, faulty.RuleID, chan error) {
	t.Helper()
	return lateRecordCtx(t, st, context.Background())
}

// lateRecordCtx is lateRecord with the Append's context.
func lateRecordCtx(t *testing.T, st *mem.Store, ctx context.Context) (*Log, *faulty.Store, faulty.RuleID, chan error) {
	t.Helper()
	f := faulty.New(st, 1)
	g := newGate(f)
	l := openLog(t, g, Options{LeaseTTL: 150 * time.Millisecond})
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(ctx, []Op{writeOp(0, "late")})
		done <- err
	}()
	<-g.started
	outage := f.Add(faulty.Rule{Op: staging.OpAny, KeyPrefix: ownerKey, Kind: faulty.Error})
	waitFor(t, "the lease to be past what the log can prove", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return time.Now().After(l.valid)
	})
	close(g.open)
	waitFor(t, "the record stored and waiting", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.late) == 1
	})
	select {
	case err := <-done:
		t.Fatalf("a record stored past the lease answered before a renewal: %v", err)
	default:
	}
	return l, f, outage, done
}

// A record stored after the lease could last be proven the log's (its
// renewals failed meanwhile) is acknowledged once a renewal sent after it
// landed lands: no other writer took the lease in between, so any taker
// lists it.
func TestAppendStoredPastLeaseWaitsForRenewal(t *testing.T) {
	st := mem.New()
	l, f, outage, done := lateRecord(t, st)
	f.Remove(outage)
	if err := <-done; err != nil {
		t.Fatalf("append once the lease was renewed: %v", err)
	}
	if got := l.Stats(); got.Records != 1 || got.Failed != 0 {
		t.Fatalf("stats %+v, want one record", got)
	}
	mustAppend(t, l, writeOp(4, "next"))
}

// A record waiting for a renewal while the store stays silent does not hold
// its caller past the caller's deadline (the mount's op_timeout): the Append
// ends with the context's error, and the record is still acknowledged once
// a renewal lands.
func TestAppendStoredPastLeaseEndsWithItsCaller(t *testing.T) {
	st := mem.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, f, outage, done := lateRecordCtx(t, st, ctx)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("append whose call ended while its record waited for a renewal: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append still waiting for a renewal 10s after its call ended, the store silent")
	}
	f.Remove(outage)
	waitFor(t, "the record acknowledged by a renewal", func() bool {
		return l.Stats().Records == 1
	})
	mustAppend(t, l, writeOp(4, "next"))
}

// The same record when another writer took the lease meanwhile fails with
// ErrLeaseLost, and is deleted: the taker may have listed the log before
// it landed, and published a checkpoint that says it holds it.
func TestAppendStoredPastLeaseTakenFails(t *testing.T) {
	st := mem.New()
	l, f, outage, done := lateRecord(t, st)
	putOwner(t, st, encodeOwner(OwnerInfo{Writer: "taker", Host: "elsewhere", PID: 1, Expires: time.Now().Add(time.Hour)}))
	f.Remove(outage)
	err := <-done
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("append stored past a lease another writer took: %v, want ErrLeaseLost", err)
	}
	if seqs := mustList(t, st); slices.Contains(seqs, 1) {
		t.Fatalf("records %v: the failed record is still stored", seqs)
	}
	if got := l.Stats(); got.Records != 0 || got.Failed != 1 {
		t.Fatalf("stats %+v, want one failed record", got)
	}
}
