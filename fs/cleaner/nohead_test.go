package cleaner_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A named file with objects under its prefix and no head (its first flush
// wrote data objects and died before the head) is left alone and reported,
// its objects kept however old: its writer may still store the head. The
// pass goes on, and the files beside it are cleaned.
func TestNamedFileWithoutHeadLeftAlone(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatParted, false)
	_, ids := namedFiles(t, st, "a", "headless", "z")
	hist := map[string]*history{}
	for i, name := range []string{"a", "z"} {
		hist[name] = writeHistory(t, st, ids[name], p, 7, uint64(7+i))
	}

	// The headless file: a first flush whose head write fails, then the
	// empty head its create stored is gone too (a file made by a version
	// that stored no head at create).
	id := ids["headless"]
	prefix := volume.FilePrefix("", id)
	faults := faulty.New(st, 1)
	f, err := engine.Create(ctx, faults, prefix, engine.Options{Params: p, FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, bytes.Repeat([]byte("first flush"), 3000), 0); err != nil {
		t.Fatal(err)
	}
	faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "/" + volume.HeadName})
	if _, err := f.Flush(ctx); err == nil {
		t.Fatal("flush with a failing head write succeeded")
	}
	f.Close()
	if err := st.Delete(ctx, volume.HeadKey(prefix)); err != nil {
		t.Fatal(err)
	}
	headless := keys(t, st, prefix)
	if len(headless) == 0 {
		t.Fatal("the failed flush left no objects")
	}

	// Long after: past every grace, with no writer marker alive.
	at := time.Now().Add(24 * time.Hour)
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 2, Grace: time.Hour, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatalf("the pass failed at the file without a head: %v", err)
	}
	if got := keys(t, st, prefix); !slices.Equal(got, headless) {
		t.Fatalf("objects of the file without a head: %v, want all of %v kept", got, headless)
	}
	var skipped []string
	for _, s := range rep.Skipped {
		if strings.HasPrefix(s.Key, prefix) {
			if s.Reason != cleaner.ErrNoHead.Error() {
				t.Errorf("%s left alone for %q, want %q", s.Key, s.Reason, cleaner.ErrNoHead)
			}
			skipped = append(skipped, s.Key)
		}
	}
	if !slices.Equal(skipped, headless) {
		t.Fatalf("reported as left alone %v, want %v", skipped, headless)
	}
	if rep.Files != 3 {
		t.Fatalf("%d files planned, want 3", rep.Files)
	}
	for _, name := range []string{"a", "z"} {
		h := hist[name]
		deleted := 0
		for _, d := range rep.Deleted {
			if strings.HasPrefix(d.Key, h.prefix) {
				deleted++
			}
		}
		chain := h.chain(t, st)
		if deleted == 0 || len(chain) >= len(h.cnos) {
			t.Fatalf("file %s: %d objects deleted, checkpoints %v left of %v; want its dropped ones collected", name, deleted, chain, h.cnos)
		}
		for _, cno := range chain {
			h.checkAt(t, st, cno)
		}
	}

	// Cleaning that one file alone leaves it so too.
	rep, err = cleaner.CleanFile(ctx, st, prefix, id, cleaner.Options{Keep: 2, Grace: time.Hour, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatalf("cleaning the file without a head: %v", err)
	}
	if got := keys(t, st, prefix); !slices.Equal(got, headless) || len(rep.Skipped) != len(headless) {
		t.Fatalf("after cleaning it alone: objects %v, left alone %v; want all of %v kept and reported", got, rep.Skipped, headless)
	}
}
