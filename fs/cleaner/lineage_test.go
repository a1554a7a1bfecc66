package cleaner_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// putLineage stores a lineage object of the file at prefix made by cno,
// naming other as the owner of every object up to upto.
func putLineage(t *testing.T, st staging.Store, prefix, id string, cno uint64, other string, upto uint64) string {
	t.Helper()
	b, err := segment.EncodeLineage(segment.Lineage{FileTag: segment.FileTag(id), Cno: cno,
		Entries: []segment.LineageEntry{{FileID: other, Upto: upto}}})
	if err != nil {
		t.Fatal(err)
	}
	key := segment.LineageKey(prefix, cno)
	if _, err := st.Put(context.Background(), key, b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return key
}

func exists(t *testing.T, st staging.Store, key string) bool {
	t.Helper()
	_, err := st.Head(context.Background(), key)
	if err != nil && !errors.Is(err, staging.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A lineage object no retained checkpoint names goes by the rules of a
// checkpoint object of its cno: at or below the head's cno after MinAge,
// above it after the grace period (a copy in progress stores it before its
// head), and not under a live writer marker. A reference marker of a copy
// that has no head stays while it is young (the copy may be in progress)
// and goes after the grace period. None of them is reported as unknown.
func TestLineageObjectsAndStaleMarkers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		writer  bool // a live writer marker covering cno 9
		// whether each survives: lineage at cno 2 (below the head), at 9
		// (above), and the markers of a copy without a head and of one
		// whose lineage does not name the file
		below, above, marker bool
	}{
		{"young", 0, false, false, true, true},
		{"past grace", 2 * time.Hour, false, false, false, false},
		{"past grace, live writer", 2 * time.Hour, true, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mem.New()
			h := writeHistory(t, st, "lin", params(segment.FormatStream, false), 3, 5)
			below := putLineage(t, st, h.prefix, h.id, 2, "other", 1)
			above := putLineage(t, st, h.prefix, h.id, 9, "other", 3)
			marker := volume.RefKey(h.prefix, "ghost")
			if _, err := st.Put(ctx, marker, nil, staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			// A file with a head but no lineage naming this one: its
			// marker is as stale.
			writeHistory(t, st, "plain", params(segment.FormatStream, false), 1, 6)
			plain := volume.RefKey(h.prefix, "plain")
			if _, err := st.Put(ctx, plain, nil, staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			at := time.Now().Add(tc.elapsed)
			if tc.writer {
				// TTL beyond the elapsed time: live at the run's clock.
				if _, err := st.Put(ctx, h.prefix+volume.WritersDir+"w", writermark.Encode(writermark.Marker{Lo: 9, TTL: 3 * time.Hour}), staging.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rep.Skipped {
				t.Errorf("left alone %s: %s", s.Key, s.Reason)
			}
			for _, c := range []struct {
				key  string
				want bool
			}{{below, tc.below}, {above, tc.above}, {marker, tc.marker}, {plain, tc.marker}} {
				if got := exists(t, st, c.key); got != c.want {
					t.Errorf("%s exists %v, want %v (deleted %v)", c.key, got, c.want, rep.Deleted)
				}
			}
			for _, cno := range h.cnos {
				h.checkAt(t, st, cno)
			}
		})
	}
}

// deletedKeys are the keys a run deleted, sorted.
func deletedKeys(rep *cleaner.Report) []string {
	var out []string
	for _, d := range rep.Deleted {
		out = append(out, d.Key)
	}
	slices.Sort(out)
	return out
}

// testUnreadableCopy: see TestUnreadableCopyKeepsFileWhole. copyFn makes
// file dst a copy by reference of src.
func testUnreadableCopy(t *testing.T, copyFn func(t *testing.T, st staging.Store, p engine.Params, dst, src string)) {
	ctx := context.Background()
	st := mem.New()
	p := params(segment.FormatStream, false)
	ns, ids := namedFiles(t, st, "d")
	dID := ids["d"]
	// "0" is listed before any id the namespace makes (hex): the file is
	// cleaned before its copy is reaped.
	x := writeHistory(t, st, "0", p, 3, 9)
	copyFn(t, st, p, dID, x.id)
	if _, err := ns.Unlink(ctx, namespace.RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	dPrefix := volume.FilePrefix("", dID)
	lins := keys(t, st, dPrefix+segment.LineageDir)
	if len(lins) != 1 {
		t.Fatalf("copy's lineage objects %v, want one", lins)
	}
	b, _, err := st.Get(ctx, lins[0], staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if _, err := st.Put(ctx, lins[0], b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := keys(t, st, x.prefix)
	// A first run finds the copy orphaned; the orphan's grace counts from
	// then.
	late := time.Now().Add(2 * time.Hour)
	o := cleaner.Options{Keep: 1, Grace: time.Hour, Now: func() time.Time { return late }}
	if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
		t.Fatal(err)
	}
	late = late.Add(2 * time.Hour)
	rep, err := cleaner.CleanVolume(ctx, st, "", o)
	if err != nil {
		t.Fatal(err)
	}
	if after := keys(t, st, x.prefix); !slices.Equal(before, after) {
		t.Fatalf("file a copy points into lost objects while the copy could not be read: %v -> %v", before, after)
	}
	marker := volume.RefKey(x.prefix, dID)
	if len(rep.Skipped) != 1 || rep.Skipped[0].Key != marker {
		t.Fatalf("skipped %v, want the marker %s", rep.Skipped, marker)
	}
	if left := keys(t, st, dPrefix); len(left) != 0 {
		t.Fatalf("the orphaned copy was not reaped: %v", left)
	}
	if _, err := cleaner.CleanVolume(ctx, st, "", o); err != nil {
		t.Fatal(err)
	}
	if exists(t, st, marker) {
		t.Fatal("stale marker of a reaped copy kept past the grace period")
	}
	if after := keys(t, st, x.prefix); len(after) >= len(before) {
		t.Fatalf("nothing of the file deleted once its copy was gone: %v", after)
	}
	x.checkAt(t, st, x.cnos[len(x.cnos)-1])
}

// headHook calls onHead before each Head.
type headHook struct {
	staging.Store
	onHead func(key string)
}

func (h headHook) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	h.onHead(key)
	return h.Store.Head(ctx, key)
}

// A stale marker stored again between the listing and its deletion (a copy
// starting again) is not the marker judged stale: it stays.
func TestStaleMarkerStoredAgainStays(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	h := writeHistory(t, mem, "s", params(segment.FormatStream, false), 2, 3)
	marker := volume.RefKey(h.prefix, "ghost")
	for _, tc := range []struct {
		name    string
		again   bool
		survive bool
	}{{"stored again", true, true}, {"untouched", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := mem.Put(ctx, marker, nil, staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			st := headHook{Store: mem, onHead: func(key string) {
				if tc.again && key == marker {
					if _, err := mem.Put(ctx, marker, nil, staging.PutOptions{}); err != nil {
						t.Error(err)
					}
				}
			}}
			late := time.Now().Add(2 * time.Hour)
			rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Grace: time.Hour, Now: func() time.Time { return late }})
			if err != nil {
				t.Fatal(err)
			}
			if got := exists(t, mem, marker); got != tc.survive {
				t.Fatalf("marker exists %v, want %v (deleted %v)", got, tc.survive, deletedKeys(rep))
			}
			if deleted := slices.Contains(deletedKeys(rep), marker); deleted == tc.survive {
				t.Fatalf("report deleted %v", deletedKeys(rep))
			}
		})
	}
}
