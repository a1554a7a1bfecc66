package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// recordGate holds the PUT of a record made once armed until release is
// closed; arrived is closed when it comes.
type recordGate struct {
	staging.Store
	armed   atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func (g *recordGate) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasPrefix(key, testPrefix+Dir) && key != ownerKey && g.armed.CompareAndSwap(true, false) {
		close(g.arrived)
		<-g.release
	}
	return g.Store.Put(ctx, key, data, o)
}

// A lease is not taken back while a record of the log is on its way: a
// taker that listed the log before the record landed numbered its own
// record from the same place, or published a checkpoint covering its
// number (the file says yes to the take-back: its numbers are this log's),
// so the record, landing after the take-back, would be acknowledged and
// never read. The campaign's olease lost an acknowledged write of 8,069
// bytes so: the home mount "took the wal lease back: no other writer wrote
// meanwhile" with its record still held. Once the record's PUT ends (it
// fails: the lease is lost meanwhile), the lease is taken back. Before,
// retake took it back at once.
func TestLeaseNotTakenBackWithARecordOnItsWay(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	g := &recordGate{Store: st, arrived: make(chan struct{}), release: make(chan struct{})}
	// A TTL no renewal comes near in the test's time: retake is called here,
	// not by the renewer.
	l := openLog(t, g, Options{LeaseTTL: 3600e9, Retake: func(context.Context, uint64) (bool, error) { return true, nil }})
	mustAppend(t, l, writeOp(0, "first"))
	g.armed.Store(true)
	appended := make(chan error, 1)
	go func() { _, err := l.Append(ctx, []Op{writeOp(10, "on its way")}); appended <- err }()
	<-g.arrived
	// Another opener took the lease and let it go: the owner object is gone.
	if err := st.Delete(ctx, ownerKey); err != nil {
		t.Fatal(err)
	}
	if final, err := l.retake(ctx); !errors.Is(err, ErrLeaseLost) || final {
		close(g.release)
		t.Fatalf("retake with a record on its way: final %v, %v; want a refusal to try again", final, err)
	}
	if _, _, err := st.Get(ctx, ownerKey, staging.Whole()); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("the owner object after the refused take-back: %v, want none", err)
	}
	// The renewer found the lease lost: the record in flight fails when it
	// lands, and then the lease is taken back.
	l.mu.Lock()
	l.leaseLost = fmt.Errorf("taken meanwhile: %w", ErrLeaseLost)
	l.mu.Unlock()
	close(g.release)
	if err := <-appended; err == nil {
		t.Fatal("a record that landed after the lease was lost was acknowledged")
	}
	if final, err := l.retake(ctx); err != nil || final {
		t.Fatalf("retake once the record's PUT ended: final %v, %v; want the lease back", final, err)
	}
}
