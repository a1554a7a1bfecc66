package engine

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestFlushSettlesWithoutMu: an fsync whose data went up ahead (stream
// segments) waits for those uploads to complete without File.mu, so a
// read of the file goes on meanwhile; writes wait for the flush (the
// gate). Before, the flush waited for every upload in flight holding
// File.mu exclusively: through a mount, a pread during an fsync of a
// 512 MiB file waited up to 212 ms.
func TestFlushSettlesWithoutMu(t *testing.T) {
	ctx := context.Background()
	g := newGate(mem.New())
	p := piecesParams(12 << 20)
	f := mustCreate(t, g, "su/", p)
	t.Cleanup(func() { f.Close() })
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(g.open) }) }
	t.Cleanup(openGate)        // first: a failed wait below must not leave the flush held
	data := pattern(6<<20, 31) // one piece sent ahead, held by the gate
	writeSeq(t, f, data, 0, 1<<20)
	waitFor(t, func() bool { held, _ := g.stats(); return held > 0 })

	flushed := make(chan error, 1)
	go func() {
		_, err := f.Flush(ctx)
		flushed <- err
	}()
	// The flush settles what went ahead: it lets go of File.mu, a gate
	// holding writes, while the held piece is in flight.
	waitFor(t, func() bool {
		if !f.mu.TryRLock() {
			return false
		}
		defer f.mu.RUnlock()
		return f.gate != nil && !f.gate.writes
	})
	got := make([]byte, 64<<10)
	if _, err := f.ReadAt(ctx, got, 1<<20); err != nil || !bytes.Equal(got, data[1<<20:1<<20+64<<10]) {
		t.Fatalf("a read while the flush settles: %v, bytes as written %v", err, bytes.Equal(got, data[1<<20:1<<20+64<<10]))
	}
	openGate()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	flushAndCheck(t, g, f, "su/", p, data)
}
