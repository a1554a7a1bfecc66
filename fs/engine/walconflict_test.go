package engine

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// headGateStore holds the first Put of a head made once armed until
// release is closed; arrived is closed when it comes.
type headGateStore struct {
	staging.Store
	armed   atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func (g *headGateStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasSuffix(key, "/"+HeadKey) && g.armed.CompareAndSwap(true, false) {
		close(g.arrived)
		<-g.release
	}
	return g.Store.Put(ctx, key, data, o)
}

// headWAL reads what the stored head says of the WAL.
func headWAL(t *testing.T, st staging.Store, prefix string) (applied uint64, tracked bool) {
	t.Helper()
	info, err := st.Head(context.Background(), prefix+HeadKey)
	if err != nil {
		t.Fatalf("read the head of %s: %v", prefix, err)
	}
	applied, tracked, err = HeadWAL(info)
	if err != nil {
		t.Fatal(err)
	}
	return applied, tracked
}

// A mount without the WAL holds a write of A×100,000 over X×200,000; a
// WAL mount truncates the file to 0 and publishes it (fsync), and closes
// it. When the plain mount's flush lands first, merging onto the head the
// WAL writer had marked, the WAL writer's publish loses its If-Match, with
// no later flush of its file to come: the plain mount's head must still
// say the file is written with the WAL, and the WAL writer's close must
// publish its acknowledged truncate over the plain mount's checkpoint (the
// write, then the truncate: empty). When the WAL publish lands first, the
// plain mount's flush merges onto it (the truncate, then the write:
// A×100,000) and keeps the mark. Never a mix of both. Before, the plain
// mount's head dropped the WAL's mark, the close left the truncate's
// record behind for good, and the file read as A×100,000 then X×100,000
// everywhere.
func TestWALPublishLostToPlainFlushIsMerged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		walFirst bool
		want     int // As at the end
	}{
		{"plain flush lands first", false, 0},
		{"WAL publish lands first", true, 100_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			const prefix = "tw/"
			plain := smallParams(segment.FormatStream)
			c := mustCreate(t, st, prefix, plain)
			if _, err := c.WriteAt(ctx, bytes.Repeat([]byte{'X'}, 200_000), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			c.Close()

			p := mustOpen(t, st, prefix, plain)
			defer p.Close()
			as := bytes.Repeat([]byte{'A'}, 100_000)
			if _, err := p.WriteAt(ctx, as, 0); err != nil {
				t.Fatal(err)
			}

			gate := &headGateStore{Store: st, arrived: make(chan struct{}), release: make(chan struct{})}
			w, err := Open(ctx, gate, prefix, Options{Params: walParams(segment.FormatStream), FileID: prefix})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Truncate(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if tc.walFirst {
				close(gate.release)
			}
			gate.armed.Store(true)
			if _, err := w.Flush(ctx); err != nil { // the fsync: acknowledged
				t.Fatal(err)
			}
			<-gate.arrived // the publish's head is held back, or not
			if tc.walFirst {
				waitPublished(w)
			}

			if _, err := p.Flush(ctx); err != nil {
				t.Fatalf("plain mount's flush: %v", err)
			}
			if _, tracked := headWAL(t, st, prefix); !tracked {
				t.Errorf("the plain mount's flush over a head written with the WAL published a head without %s: records after it are found by no opener", walMeta)
			}
			if !tc.walFirst {
				close(gate.release)
			}
			waitPublished(w)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if applied, _ := headWAL(t, st, prefix); applied < 1 {
				t.Errorf("after the WAL writer's close the head holds WAL records up to %d: its acknowledged truncate (record 1) is not published", applied)
			}
			if seqs, err := wal.List(ctx, st, prefix); err != nil || len(seqs) != 0 {
				t.Errorf("records left after the WAL writer's close: %v %v", seqs, err)
			}

			r, err := Open(ctx, st, prefix, Options{Params: walParams(segment.FormatStream), FileID: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := readAll(t, r); !bytes.Equal(got, as[:tc.want]) {
				t.Fatalf("file of %d bytes (%d of them A, from the start); want %d A", len(got), commonPrefix(got, as), tc.want)
			}
		})
	}
}
