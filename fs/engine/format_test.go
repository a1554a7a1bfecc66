package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A file with no head yet (made empty by an older ckptfs cp, or by a mount
// before heads were stored at create) is opened empty, without storing a
// head, in two Files of different formats; the first head is the format of
// whichever publishes first. The other File, made in its own mount's format,
// takes that head at its next refresh and must read the published
// checkpoint in the head's format. (The campaign's
// dir mode: a file ckptfs cp made from an empty one, written on one mount,
// read through a descriptor held on the other: a corrupt object refused,
// EIO, since the reader's map loader kept its mount's format.)
func TestFormatOfFirstHeadTakenByAnEmptyFile(t *testing.T) {
	for _, formats := range [][2]segment.Format{
		{segment.FormatStream, segment.FormatParted},
		{segment.FormatParted, segment.FormatStream},
	} {
		t.Run(formats[0].String()+" writes, "+formats[1].String()+" reads", func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			open := func(fm segment.Format) *File {
				f, err := Create(ctx, st, "ef/", Options{Params: smallParams(fm), FileID: "ef"})
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			w, r := open(formats[0]), open(formats[1])
			defer w.Close()
			defer r.Close()
			want := bytes.Repeat([]byte("published in the writer's format "), 3000)
			if _, err := w.WriteAt(ctx, want, 0); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			changed, err := r.Refresh(ctx)
			if err != nil || !changed {
				t.Fatalf("refresh: changed %v, %v; want the writer's head taken", changed, err)
			}
			buf := make([]byte, len(want))
			n, err := r.ReadAt(ctx, buf, 0)
			if err != nil || !bytes.Equal(buf[:n], want) {
				t.Fatalf("read after taking the head: %d bytes, %v; want the writer's %d", n, err, len(want))
			}
		})
	}
}
