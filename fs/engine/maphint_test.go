package engine

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// headHint is the MapHint of the head stored at prefix now.
func headHint(t *testing.T, st staging.Store, prefix string) MapHint {
	t.Helper()
	hd, _, err := segment.ReadHead(context.Background(), st, volume.HeadKey(prefix), segment.FileTag(prefix))
	if err != nil {
		t.Fatal(err)
	}
	in := hd.Inode
	return MapHint{Format: in.Format, MetaBlockSize: in.MetaBlockSize, Root: in.Root, Height: in.Height, Parts: in.Parts, Lineage: in.Lineage}
}

func openHinted(t *testing.T, st staging.Store, prefix string, p Params, h MapHint) *File {
	t.Helper()
	f, err := Open(context.Background(), st, prefix, Options{Params: p, FileID: prefix, MapHint: &h})
	if err != nil {
		t.Fatalf("open %s: %v", prefix, err)
	}
	return f
}

// An open with a hint loads the map's path to the first block while it
// reads the head: the first read then loads no index region of its own.
func TestMapHintLoadsFirstPath(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := restoreParams()
	data := storedFile(t, st, "h/", p, 32<<20, 3)
	hint := headHint(t, st, "h/")
	if hint.Height < 2 {
		t.Fatalf("map of height %d: want index nodes above the leaves", hint.Height)
	}

	// Without a hint the first read loads the path itself.
	plain := mustOpen(t, st, "h/", p)
	before := plain.loader.Stats().HeaderReads
	buf := make([]byte, 64<<10)
	if _, err := plain.ReadAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	path := plain.loader.Stats().HeaderReads - before
	plain.Close()
	if before != 0 || path == 0 {
		t.Fatalf("without a hint: %d index regions loaded by the open, %d by the first read", before, path)
	}

	f := openHinted(t, st, "h/", p, hint)
	defer f.Close()
	f.hint.wg.Wait()
	warmed := f.loader.Stats().HeaderReads
	if _, err := f.ReadAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[:len(buf)]) {
		t.Fatal("the first block reads other bytes")
	}
	if got := f.loader.Stats().HeaderReads - warmed; warmed != path || got != 0 {
		t.Fatalf("with a hint: %d index regions loaded by the open, %d by the first read; want %d and 0", warmed, got, path)
	}
}

// A hint is a guess: one from an older checkpoint, of another layout, or
// naming objects that are not there changes what is loaded, never what is
// read.
func TestMapHintWrongGuesses(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := restoreParams()
	storedFile(t, st, "w/", p, 16<<20, 5)
	old := headHint(t, st, "w/")
	// A new checkpoint over all of it: every block elsewhere.
	f := mustOpen(t, st, "w/", p)
	data := pattern(16<<20, 6)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if now := headHint(t, st, "w/"); now.Root == old.Root {
		t.Fatal("the new checkpoint kept the old root")
	}
	missing := old
	missing.Root.Cno += 100
	parted := old
	parted.Format = segment.FormatParted
	badSize := old
	badSize.MetaBlockSize = 3
	for name, h := range map[string]MapHint{
		"older checkpoint": old, "objects not there": missing,
		"other layout": parted, "impossible layout": badSize,
	} {
		t.Run(name, func(t *testing.T) {
			f := openHinted(t, st, "w/", p, h)
			defer f.Close()
			got := make([]byte, len(data))
			if _, err := f.ReadAt(ctx, got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("read other bytes than the head's checkpoint holds")
			}
		})
	}
}

// stallObjects holds every Get of an object (not the head) until its
// context ends, counting those held.
type stallObjects struct {
	staging.Store
	held, ever atomic.Int64
}

func (s *stallObjects) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if !strings.HasSuffix(key, volume.HeadName) {
		s.held.Add(1)
		s.ever.Add(1)
		defer s.held.Add(-1)
		<-ctx.Done()
		return nil, staging.ObjectInfo{}, ctx.Err()
	}
	return s.Store.Get(ctx, key, r)
}

// The load a hint starts is the file's: Close ends it and waits for it,
// however long the store takes.
func TestMapHintCloseEndsLoad(t *testing.T) {
	st := mem.New()
	p := restoreParams()
	storedFile(t, st, "c/", p, 4<<20, 7)
	stall := &stallObjects{Store: st}
	f := openHinted(t, stall, "c/", p, headHint(t, st, "c/"))
	for stall.ever.Load() == 0 {
		time.Sleep(time.Millisecond) // the load has begun
	}
	done := make(chan struct{})
	go func() {
		f.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waits for the load the hint started")
	}
	if n := stall.held.Load(); n != 0 {
		t.Fatalf("%d requests of the load still held after Close returned", n)
	}
}
