package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestWaitsForAFlushInterrupted: every change that waits for a Flush (on
// flushMu or on its blocks), and a read waiting for blocks held
// exclusively, ends when its context does — the kernel's interrupt of a
// caller stuck behind an fsync of a GiB file on a slow link — having
// changed nothing. Before, they waited on a sync.RWMutex and the range
// lock's condition variable, which no context could end.
func TestWaitsForAFlushInterrupted(t *testing.T) {
	const size = 32 << 10
	for _, tc := range []struct {
		name string
		// excl: the test holds every block exclusively (a merge, a
		// rollback) rather than as a Flush does.
		excl bool
		op   func(ctx context.Context, f *File) error
	}{
		{name: "write into the flushed blocks", op: func(ctx context.Context, f *File) error {
			_, err := f.WriteAt(ctx, pattern(1<<10, 7), 0)
			return err
		}},
		{name: "append", op: func(ctx context.Context, f *File) error {
			_, _, err := f.Append(ctx, pattern(1<<10, 7))
			return err
		}},
		{name: "truncate", op: func(ctx context.Context, f *File) error { return f.Truncate(ctx, 1<<10) }},
		{name: "zero", op: func(ctx context.Context, f *File) error { return f.Zero(ctx, 0, 8<<10) }},
		{name: "zero range growing", op: func(ctx context.Context, f *File) error {
			return f.ZeroRange(ctx, 0, 2*size, false)
		}},
		{name: "extend", op: func(ctx context.Context, f *File) error { return f.Extend(ctx, 2*size) }},
		{name: "write by reference", op: func(ctx context.Context, f *File) error {
			return f.WriteRef(ctx, 0, 16<<10, bytes.NewReader(pattern(16<<10, 9)), 0)
		}},
		{name: "read", excl: true, op: func(ctx context.Context, f *File) error {
			_, err := f.ReadAt(ctx, make([]byte, 4<<10), 0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := mem.New()
			p := flushUnlockedParams()
			stored := storedFile(t, base, "wi/", p, size, 5)
			f := mustOpen(t, base, "wi/", p)
			defer f.Close()

			// Hold what a Flush holds while it sends: flushMu and blocks
			// [0, end) shared (or every block exclusively).
			var release func()
			if tc.excl {
				release = f.ranges.lock(allBlocks.lo, allBlocks.hi, true)
			} else {
				f.flushMu.Lock()
				var h flushHold
				h.take(f)
				f.mu.Unlock()
				release = func() { h.release(); f.flushMu.Unlock() }
			}
			octx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tc.op(octx, f) }()
			cancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				release()
				<-done
				t.Fatal("still waiting 30s after its context ended")
			}
			release()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted while waiting: %v; want context.Canceled", err)
			}
			if st := f.Stat(); st.Dirty || st.Size != size {
				t.Fatalf("after the interrupted wait: dirty %v, size %d; want clean, %d", st.Dirty, st.Size, size)
			}
			got := make([]byte, size)
			if _, err := f.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, stored) {
				t.Fatalf("after the interrupted wait: read %v, bytes as stored %v", err, bytes.Equal(got, stored))
			}
			// Nothing is left held: the same change goes through now.
			if err := tc.op(ctx, f); err != nil {
				t.Fatalf("once the hold is gone: %v", err)
			}
		})
	}
}

// TestRangeLockLeftWaiterLetsOthersGo: a request that leaves the queue
// (its context ended) no longer holds back the requests behind it.
func TestRangeLockLeftWaiterLetsOthersGo(t *testing.T) {
	var l rangeLock
	flush := l.lockFlush(0, 10)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := l.lockCtx(ctx, 0, 10, true) // a write behind the flush
		left <- err
	}()
	// Wait until the write is queued, so that the read below is behind it.
	for {
		l.mu.Lock()
		n := len(l.waiting)
		l.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	excl := make(chan struct{})
	go func() {
		// An exclusive request behind the write waits for it and the flush.
		release := l.lock(5, 6, true)
		release()
		close(excl)
	}()
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the write left with %v, want context.Canceled", err)
	}
	flush()
	select {
	case <-excl:
	case <-time.After(30 * time.Second):
		t.Fatal("a request behind the write that left still waits")
	}
}
