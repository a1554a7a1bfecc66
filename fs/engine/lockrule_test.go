package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// lockRuleCase is one operation checked against the rule "no store request
// under File.mu" (doc.go, Locking): run alone on a file whose store is a
// lockCheckStore, armed for the operation only (not its setup).
type lockRuleCase struct {
	name string
	p    Params
	// stored: the file holds data published by an earlier Open (and is
	// opened again, cold), else it is new and empty.
	stored bool
	op     func(ctx context.Context, f *File) error
	// known names the path that still makes a request under mu (the list
	// in docs/engine-locks.md): the case asserts that it does, so that the
	// row is cleared when the path is fixed. Empty: no request under mu.
	known string
}

const lockRuleSize = 64 << 10 // of the stored file: 128 blocks of smallParams

func lockRuleCases() []lockRuleCase {
	small := smallParams(segment.FormatStream)
	// Objects of at most 8 KiB: a flush of 16 KiB stores data parts, under
	// a writer marker, before part 0 (nothing sent ahead by the write).
	severalObjects := small
	severalObjects.MaxObjectBytes = 8 << 10
	severalObjects.StreamSegmentBytes = 0
	return []lockRuleCase{
		{name: "stat", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			f.Stat()
			return nil
		}},
		{name: "write whole new blocks", p: small, op: func(ctx context.Context, f *File) error {
			_, err := f.WriteAt(ctx, pattern(4<<10, 1), 0)
			return err
		}},
		{name: "read dirty blocks", p: small, op: func(ctx context.Context, f *File) error {
			if _, err := f.WriteAt(ctx, pattern(4<<10, 1), 0); err != nil {
				return err
			}
			_, err := f.ReadAt(ctx, make([]byte, 4<<10), 0)
			return err
		}},
		{name: "write whole stored blocks", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			_, err := f.WriteAt(ctx, pattern(4<<10, 2), 8<<10)
			return err
		}},
		{name: "read a cold block", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			_, err := f.ReadAt(ctx, make([]byte, 512), 20<<10)
			return err
		}, known: "the read's map loads (planLocked) under mu shared"},
		{name: "write part of a cold block", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			_, err := f.WriteAt(ctx, []byte("x"), 20<<10+7)
			return err
		}},
		{name: "truncate into a cold block", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			return f.Truncate(ctx, 20<<10+7)
		}},
		{name: "zero part of a cold block", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			return f.Zero(ctx, 20<<10+7, 100)
		}},
		{name: "zero a range, growing, from inside a cold block", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			return f.ZeroRange(ctx, lockRuleSize-100, 300, false)
		}},
		{name: "flush", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			if _, err := f.WriteAt(ctx, pattern(4<<10, 3), 0); err != nil {
				return err
			}
			_, err := f.Flush(ctx)
			return err
		}},
		{name: "flush in several objects", p: severalObjects, stored: true, op: func(ctx context.Context, f *File) error {
			if _, err := f.WriteAt(ctx, pattern(16<<10, 3), 20<<10); err != nil {
				return err
			}
			t, err := f.Flush(ctx)
			if err == nil && t.Objects < 2 {
				return fmt.Errorf("the flush stored %d objects, want data parts and part 0", t.Objects)
			}
			return err
		}},
		{name: "flush a small new file (part 0 in its head)", p: small, op: func(ctx context.Context, f *File) error {
			if _, err := f.WriteAt(ctx, pattern(1<<10, 3), 0); err != nil {
				return err
			}
			_, err := f.Flush(ctx)
			return err
		}},
		{name: "close a clean file", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			return f.Close()
		}},
		{name: "refresh, nothing new", p: small, stored: true, op: func(ctx context.Context, f *File) error {
			_, err := f.Refresh(ctx)
			return err
		}},
	}
}

// Every operation of the table makes its store requests without File.mu
// held, or is one of the paths known to (lockRuleCase.known), which must
// still do so.
func TestNoStoreRequestUnderMu(t *testing.T) {
	for _, c := range lockRuleCases() {
		t.Run(c.name, func(t *testing.T) {
			got := runLockRuleCase(t, c)
			switch {
			case c.known == "" && len(got) > 0:
				t.Errorf("%d store requests under File.mu; the first:\n%s", len(got), got[0])
			case c.known != "" && len(got) == 0:
				t.Errorf("no store request under File.mu any more (%s): clear the row's known", c.known)
			}
		})
	}
}

// runLockRuleCase runs c and returns each request made under mu during its
// operation, with the stack that made it.
func runLockRuleCase(t *testing.T, c lockRuleCase) []string {
	t.Helper()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		got  []string
		arm  atomic.Bool
		base = mem.New()
	)
	lc := &lockCheckStore{Store: base, armed: &arm, report: func(op, stack string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, op+"\n"+stack)
	}}
	var st staging.Store = lc
	f := mustCreate(t, st, "lr/", c.p)
	if c.stored {
		if _, err := f.WriteAt(ctx, pattern(lockRuleSize, 7), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		f = mustOpen(t, st, "lr/", c.p)
	}
	arm.Store(true)
	err := c.op(ctx, f)
	arm.Store(false)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

// The detector sees a request made under mu, and not one made without it.
func TestLockCheckStoreSeesMu(t *testing.T) {
	var n atomic.Int32
	lc := &lockCheckStore{Store: mem.New(), report: func(op, stack string) {
		if !strings.Contains(op, "Head") {
			t.Errorf("reported %q", op)
		}
		n.Add(1)
	}}
	ctx := context.Background()
	f, err := Create(ctx, lc, "ls/", Options{Params: smallParams(segment.FormatStream), FileID: "ls/"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _ = f.st.Head(ctx, "ls/x")
	if n.Load() != 0 {
		t.Fatalf("a request without mu reported")
	}
	for _, shared := range []bool{false, true} {
		if shared {
			f.mu.RLock()
		} else {
			f.mu.Lock()
		}
		_, _ = f.st.Head(ctx, "ls/x")
		if shared {
			f.mu.RUnlock()
		} else {
			f.mu.Unlock()
		}
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests under mu reported, want 2", n.Load())
	}
}

// A hold of File.mu that leaves an invariant broken panics at its Unlock
// (checkAtUnlock), naming the invariant.
func TestInvariantCheckedAtUnlock(t *testing.T) {
	f := mustCreate(t, mem.New(), "iu/", smallParams(segment.FormatStream))
	f.mu.Lock()
	f.dirtyB += int64(f.bs) // a dirty block's bytes with no block
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, "dirtyB is") {
			t.Fatalf("Unlock recovered %v, want the broken invariant", r)
		}
	}()
	f.mu.Unlock()
}
