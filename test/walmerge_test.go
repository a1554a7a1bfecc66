package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// replaceGate holds the first conditional replace of a file's head (a PUT
// of .../inode with If-Match) made once armed, until release is closed.
type replaceGate struct {
	staging.Store
	armed   atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func (g *replaceGate) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasSuffix(key, "/inode") && o.Conditions.IfMatch != "" && g.armed.CompareAndSwap(true, false) {
		close(g.arrived)
		select {
		case <-g.release:
		case <-ctx.Done():
			return staging.ObjectInfo{}, ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, data, o)
}

// TestWALTruncateLostToPlainFlush: a mount without the WAL holds an
// unflushed write of A×100,000 over X×200,000; a WAL mount truncates the
// file to 0, fsyncs (its publish's head is held back) and closes it; the
// plain mount's fsync lands first, and the WAL publish then loses its
// If-Match while the WAL mount's close waits for it. The truncate was
// acknowledged before the plain mount's fsync began, so the file ends as
// the truncate, then the write: A×100,000 on a fresh mount (the plain
// flush publishes the WAL writer's records under its merge). Before
// bfc1591 the file read as A×100,000 then X×100,000, for good: the plain
// mount's head dropped the WAL's mark and the close left the truncate's
// record behind; before the records went under the plain flush, it read
// empty: the WAL mount's close replayed the truncate over the write the
// plain mount's fsync had acknowledged.
func TestWALTruncateLostToPlainFlush(t *testing.T) {
	v := newVolume(t)
	p := v.mount("")
	if err := os.WriteFile(p.path("f"), bytes.Repeat([]byte{'X'}, 200_000), 0o644); err != nil {
		t.Fatal(err)
	}
	gate := &replaceGate{arrived: make(chan struct{}), release: make(chan struct{})}
	w := v.mountWrapped("wal=on", func(st staging.Store) staging.Store { gate.Store = st; return gate })
	// The file is written with the WAL once (an X over its first byte,
	// published at the close), so that the plain mount opens a head that
	// says so. (A head the WAL writer's first change marks keeps its ETag
	// on S3, the body being the same: a plain mount that opened it before
	// does not learn of the records from it.)
	if wf, err := os.OpenFile(w.path("f"), os.O_RDWR, 0); err != nil {
		t.Fatal(err)
	} else if _, err := wf.WriteAt([]byte{'X'}, 0); err != nil {
		wf.Close()
		t.Fatal(err)
	} else if err := wf.Close(); err != nil {
		t.Fatal(err)
	}
	pf, err := os.OpenFile(p.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pf.WriteAt(bytes.Repeat([]byte{'A'}, 100_000), 0); err != nil {
		pf.Close()
		t.Fatal(err)
	}
	wf, err := os.OpenFile(w.path("f"), os.O_RDWR, 0)
	if err != nil {
		pf.Close()
		t.Fatal(err)
	}
	// Every descriptor is closed before a check fails: a file of this
	// process left open on its own mount would deadlock the process's exit.
	steps := func() error {
		defer pf.Close()
		defer wf.Close()
		if err := wf.Truncate(0); err != nil {
			return fmt.Errorf("truncate on the WAL mount: %w", err)
		}
		gate.armed.Store(true)
		if err := wf.Sync(); err != nil {
			return fmt.Errorf("fsync on the WAL mount: %w", err)
		}
		select {
		case <-gate.arrived:
		case <-time.After(time.Minute):
			return fmt.Errorf("the WAL mount's publish never replaced the head")
		}
		if err := pf.Sync(); err != nil {
			return fmt.Errorf("fsync on the plain mount: %w", err)
		}
		if err := wf.Close(); err != nil {
			return fmt.Errorf("close on the WAL mount: %w", err)
		}
		return nil
	}
	err = steps()
	if err == nil {
		// The WAL mount's close marks its lease closing before it waits
		// for the publish held back.
		waitFor(t, time.Minute, func() error {
			st := v.store()
			_, owners := walKeys(t, st)
			for _, k := range owners {
				if b, _, err := st.Get(context.Background(), k, staging.Whole()); err == nil && bytes.Contains(b, []byte(`"closing":true`)) {
					return nil
				}
			}
			return fmt.Errorf("no lease marked closing among %v", owners)
		})
	}
	close(gate.release)
	if err != nil {
		t.Fatal(err)
	}
	w.unmount()
	p.unmount()

	r := v.mount("wal=on")
	got, err := os.ReadFile(r.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{'A'}, 100_000)) {
		as := bytes.IndexFunc(got, func(c rune) bool { return c != 'A' })
		t.Fatalf("file of %d bytes (%d A from the start); want 100000 A: the WAL mount's acknowledged truncate, then the plain mount's write its fsync acknowledged", len(got), as)
	}
}
