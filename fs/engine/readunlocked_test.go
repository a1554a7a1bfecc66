package engine

import (
	"bytes"
	"context"
	"testing"
)

// TestReadGetsWithoutMu: a read's GET of a block's data is made after the
// read lets go of File.mu (readPlanned), so that a write elsewhere in the
// file, which takes mu exclusively, goes on while the GET is in flight.
// Before, the read held mu shared across its GETs: a flush or a write of
// another block waited for the store's answer to somebody's read.
func TestReadGetsWithoutMu(t *testing.T) {
	ctx := context.Background()
	const fbn = 40
	fx := newColdFixture(t, fbn)
	buf := make([]byte, fx.bs)
	done := make(chan error, 1)
	go func() {
		_, err := fx.f.ReadAt(ctx, buf, fbn*fx.bs)
		done <- err
	}()
	if held := <-fx.pause.reached; held {
		close(fx.pause.release)
		<-done
		t.Fatal("the read's GET was made with File.mu held")
	}
	// While the GET is held: a write of another block (mu exclusive).
	other := pattern(int(fx.bs), 9)
	if _, err := fx.f.WriteAt(ctx, other, 0); err != nil {
		t.Fatalf("a write while a read's GET is in flight: %v", err)
	}
	close(fx.pause.release)
	if err := <-done; err != nil {
		t.Fatalf("the read: %v", err)
	}
	if want := fx.want[fbn*fx.bs : (fbn+1)*fx.bs]; !bytes.Equal(buf, want) {
		t.Fatal("the read returned other bytes than the block's")
	}
	got := make([]byte, fx.bs)
	if _, err := fx.f.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, other) {
		t.Fatalf("block 0 after the write: %v, bytes as written %v", err, bytes.Equal(got, other))
	}
}
