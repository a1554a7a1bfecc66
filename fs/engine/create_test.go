package engine

import (
	"context"
	"errors"
	"testing"

	"ckptfs/segment"
	"ckptfs/staging"
)

// A create whose answer was lost and resent finds its own head: the file
// exists and is ours, not ErrExists.
func TestCreateHeadAnswerLost(t *testing.T) {
	for _, wal := range []bool{false, true} {
		mem := staging.NewMem()
		p := smallParams(segment.FormatStream)
		p.WAL = wal
		f, err := Create(context.Background(), &resendStore{Store: mem, armed: true}, "a/", Options{Params: p, FileID: "a/"})
		if err != nil {
			t.Fatalf("wal=%v: create with a resent head: %v", wal, err)
		}
		data := pattern(3000, 1)
		if _, err := f.WriteAt(context.Background(), data, 0); err != nil {
			t.Fatalf("wal=%v: write: %v", wal, err)
		}
		if err := f.Sync(context.Background()); err != nil {
			t.Fatalf("wal=%v: sync: %v", wal, err)
		}
		_ = f.Close()
		g := mustOpen(t, mem, "a/", p)
		if got := readAll(t, g); string(got) != string(data) {
			t.Fatalf("wal=%v: read back %d bytes, want the %d written", wal, len(got), len(data))
		}
		_ = g.Close()
		// Someone else's head is still ErrExists.
		if _, err := Create(context.Background(), &resendStore{Store: mem, armed: true}, "a/", Options{Params: p, FileID: "a/"}); !errors.Is(err, ErrExists) {
			t.Fatalf("wal=%v: create over another head: %v, want ErrExists", wal, err)
		}
	}
}
