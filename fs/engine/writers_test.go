package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine/fakeclock"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// markerParams send small objects ahead, whole.
func markerParams() Params {
	p := DefaultParams()
	p.DataBlockSize = 512
	p.MetaBlockSize = 256
	p.MaxObjectBytes = 48 << 10
	p.DirtyLimit = 1 << 20
	p.StreamSegmentBytes = 8 << 10
	p.Concurrency = 4
	return p
}

// countingPuts counts the PUTs of writer markers.
type countingPuts struct {
	staging.Store
	mu      sync.Mutex
	markers int
}

func (c *countingPuts) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.Contains(key, "/"+volume.WritersDir) {
		c.mu.Lock()
		c.markers++
		c.mu.Unlock()
	}
	return c.Store.Put(ctx, key, data, o)
}

func (c *countingPuts) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.markers
}

func markerKeys(t *testing.T, st staging.Store, prefix string) []string {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix+volume.WritersDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// sentObjects waits for every object sent ahead and lists the data objects.
func sentObjects(t *testing.T, f *File) []staging.ObjectInfo {
	t.Helper()
	f.mu.Lock()
	err := f.s.drainLocked(context.Background())
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	objs := dataObjects(t, f.st, f.prefix)
	var out []staging.ObjectInfo
	for _, o := range objs {
		if !strings.Contains(o.Key, "/"+volume.WritersDir) {
			out = append(out, o)
		}
	}
	return out
}

// One marker PUT covers any number of objects sent ahead (no request per
// write); the marker names the pending checkpoint number and is deleted at
// Close.
func TestWriterMarkerLifecycle(t *testing.T) {
	ctx := context.Background()
	st := &countingPuts{Store: mem.New()}
	clk := fakeclock.New()
	f, err := Create(ctx, st, "wm/", Options{Params: markerParams(), FileID: "wm/", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(200<<10, 1)
	writeSeq(t, f, data, 0, 4<<10)
	if n := len(sentObjects(t, f)); n < 10 {
		t.Fatalf("%d objects sent ahead; want many", n)
	}
	if n := st.count(); n != 1 {
		t.Fatalf("%d marker PUTs for one checkpoint's objects sent ahead; want 1", n)
	}
	keys := markerKeys(t, st, "wm/")
	if len(keys) != 1 {
		t.Fatalf("markers %v; want one", keys)
	}
	w, err := writermark.Read(ctx, st, keys[0])
	if err != nil || w.Err != nil {
		t.Fatalf("read marker: %v %v", err, w.Err)
	}
	if w.Marker.Lo != 1 || w.Marker.TTL != writermark.DefaultTTL {
		t.Fatalf("marker %+v; want lo 1 and the default TTL", w.Marker)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Written again right after: the idle marker is reused, no request.
	writeSeq(t, f, data[:64<<10], 0, 4<<10)
	if n := st.count(); n != 1 {
		t.Fatalf("%d marker PUTs; want the first one only", n)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if keys := markerKeys(t, st, "wm/"); len(keys) != 0 {
		t.Fatalf("markers left after close: %v", keys)
	}
	g := mustOpen(t, st, "wm/", markerParams())
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, data) {
		t.Fatal("file reads back wrong")
	}
}

// lapse sends data ahead, then lets the marker lapse: its renewals fail for
// longer than its TTL.
func lapse(t *testing.T, deleteOne bool) (*File, *faulty.Store, []byte) {
	t.Helper()
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	clk := fakeclock.New()
	f, err := Create(ctx, faults, "lm/", Options{Params: markerParams(), FileID: "lm/", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	data := pattern(64<<10, 2)
	writeSeq(t, f, data, 0, 4<<10)
	sent := sentObjects(t, f)
	if len(sent) == 0 {
		t.Fatal("nothing was sent ahead")
	}
	id := faults.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: "lm/" + volume.WritersDir})
	for range 6 {
		clk.Advance(writermark.DefaultTTL / 3)
	}
	if deleteOne {
		// A cleaner saw the marker dead.
		if err := mem.Delete(ctx, sent[0].Key); err != nil {
			t.Fatal(err)
		}
	}
	faults.Remove(id)
	return f, faults, data
}

// A marker that lapsed while an object it covered was deleted: the flush
// fails with ErrLostObject naming it and publishes nothing.
func TestLapsedMarkerLostObject(t *testing.T) {
	ctx := context.Background()
	f, st, _ := lapse(t, true)
	for range 2 {
		_, err := f.Flush(ctx)
		var le *LostObjectError
		if !errors.Is(err, ErrLostObject) || !errors.As(err, &le) || !strings.HasPrefix(le.Key, "lm/") {
			t.Fatalf("flush after a lapse and a lost object: %v; want a *LostObjectError", err)
		}
		hd, _, err := segment.ReadHead(ctx, st, volume.HeadKey("lm/"), f.tag)
		if errors.Is(err, staging.ErrNotFound) {
			continue // Create stores nothing: still nothing published
		}
		if err != nil {
			t.Fatal(err)
		}
		if hd.Inode.Cno != 0 {
			t.Fatalf("head names checkpoint %d; want nothing published", hd.Inode.Cno)
		}
	}
}

// A marker that lapsed with nothing deleted: the flush checks the objects
// and publishes.
func TestLapsedMarkerChecked(t *testing.T) {
	ctx := context.Background()
	f, st, data := lapse(t, false)
	if _, err := f.Flush(ctx); err != nil {
		t.Fatalf("flush after a lapse, nothing lost: %v", err)
	}
	g := mustOpen(t, st, "lm/", markerParams())
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, data) {
		t.Fatal("file reads back wrong")
	}
}
