package engine

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestReadOnlyShowsWALRecords: a read-only open (a ro mount, the tools)
// shows every acknowledged WAL write after the head, a live writer's and
// those a crashed one left, and a refresh takes newer ones; it changes
// nothing in the store. Before the fix it showed the head alone (found by
// the campaign: a ro mount read a file's old bytes after a WAL writer's
// acknowledged O_TRUNC).
func TestReadOnlyShowsWALRecords(t *testing.T) {
	ctx := context.Background()
	for _, crashed := range []bool{false, true} {
		t.Run(map[bool]string{false: "live writer", true: "crashed writer"}[crashed], func(t *testing.T) {
			st := mem.New()
			o := Options{Params: walParams(segment.FormatStream), FileID: "ro"}
			a, err := Create(ctx, st, "ro/", o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.WriteAt(ctx, bytes.Repeat([]byte("published "), 900), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			waitPublished(a)
			// Logged, not published.
			if err := a.Truncate(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := a.WriteAt(ctx, []byte("logged"), 100); err != nil {
				t.Fatal(err)
			}
			want := readAll(t, a)
			if crashed {
				crash(t, a) // the process died: its lease and records stay
			} else {
				defer a.Close()
			}
			before := storeKeys(t, st, "ro/")

			ro := o
			ro.Params.WAL, ro.ReadOnly = false, true
			b, err := Open(ctx, st, "ro/", ro)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := readAll(t, b); !bytes.Equal(got, want) {
				t.Fatalf("read-only open: %d bytes %q..., want the acknowledged %d", len(got), got[:min(12, len(got))], len(want))
			}
			if !crashed {
				if _, err := a.WriteAt(ctx, []byte("MORE"), 0); err != nil {
					t.Fatal(err)
				}
				want = readAll(t, a)
				if moved, err := b.Refresh(ctx); err != nil || !moved {
					t.Fatalf("refresh of the read-only file: %v, %v; want it to take the new record", moved, err)
				}
				if got := readAll(t, b); !bytes.Equal(got, want) {
					t.Fatalf("after a refresh: %q, want %q", got, want)
				}
				before = storeKeys(t, st, "ro/")
			}
			if after := storeKeys(t, st, "ro/"); !slices.Equal(after, before) {
				t.Fatalf("the read-only open changed the store: %v, was %v", after, before)
			}
		})
	}
}
