package namespace

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestFenceStopsAMount: a mount open on the log when another writes the
// fence (ckptfs upgrade) applies every entry before it, then its next
// change fails with ErrFenced naming ckptfs upgrade (with a trusted tail
// at the end of the log: its append is refused at the fence's seq and it
// reads the fence there; without: its read of the log meets it), its refresh stops with the same error, every later one does
// without a request, and the first meeting is logged once. Nothing is
// appended after the fence, and a new Open refuses the log unless
// ReadFenced.
func TestFenceStopsAMount(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		name := "trusted tail"
		if !trusted {
			name = "untrusted tail"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := mem.New()
			clock := newFakeClock()
			core, logs := observer.New(zap.InfoLevel)
			a := openNS(t, store, Options{Clock: clock.Now, Logger: zap.New(core)})
			if _, err := a.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); err != nil {
				t.Fatal(err)
			}
			up := openNS(t, store, Options{Clock: clock.Now})
			// A change of another mount the upgrade has not seen: the
			// fence goes after it, and a sees it before the fence.
			b := openNS(t, store, Options{Clock: clock.Now})
			if _, err := b.Create(ctx, RootIno, "late", 0o644, Owner{}); err != nil {
				t.Fatal(err)
			}
			if trusted {
				// a at the end of the log: its next append goes to the
				// fence's seq, and is refused by it.
				if err := a.Refresh(ctx); err != nil || a.Seq() != 2 {
					t.Fatalf("Refresh: %v, seq %d", err, a.Seq())
				}
			}
			seq, err := up.Fence(ctx)
			if err != nil {
				t.Fatalf("Fence: %v", err)
			}
			if seq != 3 || up.Seq() != 2 {
				t.Fatalf("fence at %d with the state at %d, want 3 after 2", seq, up.Seq())
			}
			if again, err := up.Fence(ctx); err != nil || again != seq {
				t.Fatalf("Fence again: %d, %v; want %d", again, err, seq)
			}
			if !trusted {
				clock.Advance(pastTrimGrace)
			}

			_, err = a.Create(ctx, RootIno, "x", 0o644, Owner{})
			var fe *FencedError
			if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || fe.Seq != seq || !strings.Contains(err.Error(), "ckptfs upgrade") {
				t.Fatalf("a change after the fence: %v; want ErrFenced naming ckptfs upgrade", err)
			}
			if _, err := a.Lookup(ctx, RootIno, "late"); err != nil {
				t.Fatalf("the entry before the fence is not applied: %v", err)
			}
			if _, err := a.Lookup(ctx, RootIno, "x"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("the fenced change shows: %v", err)
			}
			if err := a.Refresh(ctx); !errors.Is(err, ErrFenced) {
				t.Fatalf("Refresh after the fence: %v; want ErrFenced", err)
			}
			if f := a.Fenced(); f == nil || f.Seq != seq {
				t.Fatalf("Fenced: %+v", f)
			}
			if _, err := a.Mkdir(ctx, RootIno, "y", 0o755, Owner{}); !errors.Is(err, ErrFenced) {
				t.Fatalf("a second change: %v; want ErrFenced", err)
			}
			if n := logs.FilterMessageSnippet("ckptfs upgrade").Len(); n != 1 {
				t.Fatalf("%d log lines name the upgrade, want 1: %v", n, logs.All())
			}

			// b's refresh meets it too.
			if err := b.Refresh(ctx); !errors.Is(err, ErrFenced) {
				t.Fatalf("b's refresh: %v; want ErrFenced", err)
			}
			if _, err := b.Symlink(ctx, RootIno, "s", "x", Owner{}); !errors.Is(err, ErrFenced) {
				t.Fatalf("b's change: %v; want ErrFenced", err)
			}
			if es := logEntries(t, store); len(es) != 3 || es[2].Fence == nil {
				t.Fatalf("log after the fence: %d entries, the last %+v", len(es), es[len(es)-1])
			}

			if _, err := Open(ctx, store, testRoot, Options{}); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "ckptfs upgrade") {
				t.Fatalf("Open of a fenced log: %v; want ErrFenced naming ckptfs upgrade", err)
			}
			r := openNS(t, store, Options{ReadFenced: true})
			if r.Fenced() == nil || dump(t, r) != dump(t, up) {
				t.Fatalf("ReadFenced: fence %v, state differs from the upgrade's", r.Fenced())
			}
		})
	}
}

// TestFenceBeforeBuildsThatKnowIt: a build before the fence (envelope
// versions up to 4) refuses it as a version it does not know — its changes
// and refreshes fail, it never appends past it.
func TestFenceBeforeBuildsThatKnowIt(t *testing.T) {
	data := encodeFence(7, NewFileID(), 1)
	if data[4] != 5 {
		t.Fatalf("the fence is in envelope version %d, want 5", data[4])
	}
	old := append([]byte(nil), data...)
	// What a build of version 4 checks: every version it knows is below 5.
	for _, v := range []byte{envVersion, envVersionOps, envVersionNodes, envVersionDevs} {
		if v >= old[4] {
			t.Fatalf("version %d known before the fence is not below it", v)
		}
	}
	e, err := decodeEntry("k", 7, data)
	if err != nil || e.Fence == nil || e.Fence.To != FenceToV2 {
		t.Fatalf("decode fence: %+v, %v", e, err)
	}
}

// TestFenceDecode: what a fence must be, and what is corrupt.
func TestFenceDecode(t *testing.T) {
	id := NewFileID()
	cases := []struct {
		name string
		e    *entry
		ver  byte
		ok   bool
	}{
		{"fence", &entry{Seq: 4, ID: id, Time: 1, Fence: &fenceRec{To: "v2"}}, envVersionFence, true},
		{"fence to another namespace", &entry{Seq: 4, ID: id, Time: 1, Fence: &fenceRec{To: "v3"}}, envVersionFence, false},
		{"fence with an op", &entry{Seq: 4, ID: id, Time: 1, Fence: &fenceRec{To: "v2"}, Op: &op{Kind: opMkdir, Parent: 1, Name: "d"}}, envVersionFence, false},
		{"fence in version 1", &entry{Seq: 4, ID: id, Time: 1, Fence: &fenceRec{To: "v2"}}, envVersion, false},
		{"version 5 without a fence", &entry{Seq: 4, ID: id, Time: 1, Op: &op{Kind: opMkdir, Parent: 1, Name: "d"}}, envVersionFence, false},
		{"fence of another seq", &entry{Seq: 5, ID: id, Time: 1, Fence: &fenceRec{To: "v2"}}, envVersionFence, false},
		{"fence with a bad id", &entry{Seq: 4, ID: "x", Time: 1, Fence: &fenceRec{To: "v2"}}, envVersionFence, false},
	}
	for _, c := range cases {
		body := encodeEntry(c.e)[envHeaderLen:]
		_, err := decodeEntry("k", 4, seal(kindEntry, c.ver, body))
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
	// A snapshot is never in version 5.
	snap := encodeSnapshot(newState())
	if _, err := decodeSnapshot("k", 0, seal(kindSnapshot, envVersionFence, snap[envHeaderLen:])); !errors.Is(err, ErrCorrupt) {
		t.Errorf("snapshot in version 5: %v", err)
	}
}

// TestFenceLostAnswers: a fence whose answer is lost is found by its id,
// not written twice; one refused by another mount's entry goes after it;
// Unfence deletes it and the log takes changes again.
func TestFenceLostAnswers(t *testing.T) {
	ctx := context.Background()
	store := &flakyStore{Store: mem.New()}
	up := openNS(t, store, Options{})
	store.putFault = func(key string, n int) (bool, error) {
		if n == 1 {
			return true, errLink // stored, answer lost
		}
		return false, nil
	}
	seq, err := up.Fence(ctx)
	if err != nil || seq != 1 {
		t.Fatalf("Fence with a lost answer: %d, %v", seq, err)
	}
	if es := logEntries(t, store); len(es) != 1 {
		t.Fatalf("%d entries, want the one fence", len(es))
	}
	a := openNS(t, store, Options{ReadFenced: true})
	if err := up.Unfence(ctx); err != nil {
		t.Fatal(err)
	}
	if up.Fenced() != nil {
		t.Fatal("still fenced after Unfence")
	}
	if _, err := staging.ListAll(ctx, store, prefix(testRoot)+logDir); err != nil {
		t.Fatal(err)
	}
	b := openNS(t, store, Options{})
	if _, err := b.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); err != nil {
		t.Fatalf("a change after Unfence: %v", err)
	}
	// a met the fence and stays fenced until opened again.
	if _, err := a.Mkdir(ctx, RootIno, "e", 0o755, Owner{}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a mount that met the fence: %v", err)
	}

	// Another mount's entry at the seq first: the fence goes after it.
	store.putFault = nil
	up2 := openNS(t, store, Options{})
	if _, err := b.Mkdir(ctx, RootIno, "f", 0o755, Owner{}); err != nil {
		t.Fatal(err)
	}
	seq, err = up2.Fence(ctx)
	if err != nil || seq != 3 || up2.Seq() != 2 {
		t.Fatalf("Fence after another's entry: %d (state %d), %v; want 3 after 2", seq, up2.Seq(), err)
	}
}
