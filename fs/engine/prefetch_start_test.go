package engine

import (
	"context"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// A stream that begins at offset 0 fetches ahead from its first read (the
// kernel's first READs of a file come one at a time, each a round trip
// otherwise); one that begins elsewhere proves itself first, so a random
// read fetches nothing more than its blocks.
func TestStreamFromStartFetchesAhead(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := restoreParams()
	storedFile(t, st, "s/", p, 32<<20, 9)
	buf := make([]byte, 256<<10)

	f := mustOpen(t, st, "s/", p)
	defer f.Close()
	if _, err := f.ReadStream(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second) // bounds the wait; asserts no time
	for f.ReadStats().GetsAhead == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := f.ReadStats(); s.GetsAhead == 0 || s.BytesAhead > prefetchMinWindow {
		t.Fatalf("after one read at offset 0: %d GETs ahead of %d bytes, want some, at most %d bytes", s.GetsAhead, s.BytesAhead, prefetchMinWindow)
	}

	g := mustOpen(t, st, "s/", p)
	defer g.Close()
	if _, err := g.ReadStream(ctx, buf, 8<<20); err != nil {
		t.Fatal(err)
	}
	g.rd.wg.Wait() // nothing should have been started; wait if it was
	if s := g.ReadStats(); s.GetsAhead != 0 {
		t.Fatalf("one read at 8 MiB sent %d GETs ahead", s.GetsAhead)
	}
}
