package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// viewRead reads f from off to its end with ReadStreamView in reads of chunk
// bytes, and counts the reads answered with bytes that are not the buffer's.
func viewRead(t *testing.T, f *File, off int64, chunk int) (out []byte, views int) {
	t.Helper()
	buf := make([]byte, chunk)
	for {
		b, err := f.ReadStreamView(context.Background(), buf, off)
		if len(b) > 0 && &b[0] != &buf[0] {
			views++
		}
		out = append(out, b...)
		off += int64(len(b))
		if errors.Is(err, io.EOF) || (err == nil && len(b) == 0) {
			return out, views
		}
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
}

// A sequential reader's reads inside a piece fetched ahead are answered with
// the piece's bytes (no copy), and they are the file's bytes.
func TestStreamViewReadsFlightBytes(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 24 << 20
	want := storedFile(t, mem, "v/", p, size, 11)
	f, _, _ := openCounted(t, mem, "v/", p, nil)
	defer f.Close()

	got, views := viewRead(t, f, 0, 128<<10)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not what was written", len(got))
	}
	st := f.ReadStats()
	if views == 0 || st.ViewReads != int64(views) {
		t.Fatalf("%d reads answered from a flight, ReadStats says %d: want some, and the same", views, st.ViewReads)
	}
	// Most of a sequential read lies inside pieces fetched ahead.
	if reads := size / (128 << 10); views < reads/2 {
		t.Errorf("%d of %d reads answered from a flight", views, reads)
	}
}

// A view never hides what is not in the flight: a block written since (and
// not published) is read from the dirty tier, a read across two flights is
// copied, and a read past the end stops there.
func TestStreamViewServesDirtyBlocks(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := restoreParams()
	const size = 16 << 20
	want := storedFile(t, mem, "d/", p, size, 12)
	f, _, _ := openCounted(t, mem, "d/", p, nil)
	defer f.Close()

	// Prove the stream, so that what follows is fetched ahead.
	buf := make([]byte, 128<<10)
	var off int64
	for off < 4<<20 {
		b, err := f.ReadStreamView(ctx, buf, off)
		if err != nil {
			t.Fatal(err)
		}
		off += int64(len(b))
	}
	// Wait for the flights ahead of it: a view of the next read then finds
	// its piece landed.
	nb, err := f.ReadStreamView(ctx, buf, off)
	if err != nil || !bytes.Equal(nb, want[off:off+int64(len(buf))]) {
		t.Fatalf("read at %d: %v", off, err)
	}
	off += int64(len(nb))

	// A block inside the next read changes and stays dirty.
	patch := bytes.Repeat([]byte{0xA5}, 100)
	if _, err := f.WriteAt(ctx, patch, off+1000); err != nil {
		t.Fatal(err)
	}
	copy(want[off+1000:], patch)
	cases := []struct {
		name string
		off  int64
		n    int
	}{
		{"dirty block inside", off, 128 << 10},
		{"past the written block", off + 128<<10, 128 << 10},
		{"across a grid line", 8<<20 - 64<<10, 128 << 10},
		{"the end", size - 64<<10, 128 << 10},
	}
	for _, c := range cases {
		b := make([]byte, c.n)
		got, err := f.ReadStreamView(ctx, b, c.off)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("%s: %v", c.name, err)
		}
		end := min(c.off+int64(c.n), size)
		if !bytes.Equal(got, want[c.off:end]) {
			t.Errorf("%s: read %d bytes at %d, not the file's %d", c.name, len(got), c.off, end-c.off)
		}
	}
}

// The map ahead of a sequential reader's window is loaded before the window
// gets there, so that planning never waits for an object's index.
func TestReadAheadLoadsMapAhead(t *testing.T) {
	mem := mem.New()
	p := restoreParams()
	const size = 64 << 20
	storedFile(t, mem, "w/", p, size, 13)

	// What a plan of the first 24 MiB loads: the objects the warm-up must
	// reach once the stream has read 4 MiB (window 8 MiB, the map of twice
	// as much again ahead of it).
	ref := mustOpen(t, mem, "w/", p)
	if _, err := ref.Plan(context.Background(), 0, 24<<20); err != nil {
		t.Fatal(err)
	}
	need := ref.loader.Stats().MetaReads
	ref.Close()
	// What the window alone plans (4 + 8 MiB).
	ref = mustOpen(t, mem, "w/", p)
	if _, err := ref.Plan(context.Background(), 0, 12<<20); err != nil {
		t.Fatal(err)
	}
	window := ref.loader.Stats().MetaReads
	ref.Close()
	if need <= window {
		t.Fatalf("the objects are too large for this test: %d index regions for 24 MiB, %d for 12", need, window)
	}

	f := mustOpen(t, mem, "w/", p)
	defer f.Close()
	buf := make([]byte, 128<<10)
	for off := int64(0); off < 4<<20; off += int64(len(buf)) {
		if _, err := f.ReadStream(context.Background(), buf, off); err != nil {
			t.Fatal(err)
		}
	}
	// The loads run off the read's path: wait for them (this bounds how
	// long the test waits, it asserts no time).
	deadline := time.Now().Add(10 * time.Second)
	for f.loader.Stats().MetaReads < need && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := f.loader.Stats().MetaReads; got < need {
		t.Fatalf("%d index regions loaded after reading 4 MiB, want the %d of the first 24 MiB (the window alone: %d)", got, need, window)
	}
}
