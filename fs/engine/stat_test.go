package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// stallStore holds every store of a checkpoint's object (not the head, not
// the write-ahead log) until
// release is closed, and says on stalled when the first one is held: a store
// that stopped answering.
type stallStore struct {
	staging.Store
	once    sync.Once
	stalled chan struct{}
	release chan struct{}
}

func newStallStore(st staging.Store) *stallStore {
	return &stallStore{Store: st, stalled: make(chan struct{}), release: make(chan struct{})}
}

func (s *stallStore) hold(ctx context.Context, key string) error {
	if strings.HasSuffix(key, "/"+volume.HeadName) || strings.Contains(key, "/"+wal.Dir) {
		return nil
	}
	s.once.Do(func() { close(s.stalled) })
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stallStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := s.hold(ctx, key); err != nil {
		return staging.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, data, opts)
}

func (s *stallStore) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := s.hold(ctx, key); err != nil {
		return "", err
	}
	return s.Store.UploadPart(ctx, key, uploadID, n, data)
}

// watchdog fails the test if done does not close in a long while: it catches
// a hang, it measures nothing.
func watchdog(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting after 30s (blocked behind the stalled flush)", what)
	}
}

// TestStatDuringStalledFlush: with the store stalled in the middle of a
// flush, Stat and Size answer at once with the state before the flush (the
// written size, dirty); once the store answers, the flush completes and Stat
// shows the new checkpoint, clean.
func TestStatDuringStalledFlush(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	st := newStallStore(mem)
	f := mustCreate(t, st, "f/", DefaultParams())
	defer f.Close()
	before := f.Stat()
	data := pattern(3*4096+100, 1)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	want := int64(len(data))

	flushed := make(chan struct{})
	var ft FlushTiming
	var ferr error
	go func() {
		defer close(flushed)
		ft, ferr = f.Flush(ctx)
	}()
	watchdog(t, "flush reaching the store", st.stalled)

	got := make(chan struct{})
	var s Stat
	var size int64
	go func() {
		defer close(got)
		s = f.Stat()
		size = f.Size()
	}()
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		close(st.release) // let the flush and the stat finish before failing
		<-flushed
		t.Fatal("Stat/Size waited for the stalled flush (no answer in 30s)")
	}
	if s.Size != want || size != want {
		t.Errorf("during the flush: Stat size %d, Size %d; want %d", s.Size, size, want)
	}
	if !s.Dirty || s.Cno != before.Cno {
		t.Errorf("during the flush: Dirty %v Cno %d; want dirty at checkpoint %d", s.Dirty, s.Cno, before.Cno)
	}

	close(st.release)
	watchdog(t, "flush after the store answers", flushed)
	if ferr != nil {
		t.Fatalf("flush: %v", ferr)
	}
	s = f.Stat()
	if s.Dirty || s.Cno != ft.Cno || s.Cno <= before.Cno || s.Size != want || f.Size() != want {
		t.Errorf("after the flush: %+v (flush made checkpoint %d); want clean at it, size %d", s, ft.Cno, want)
	}
}

// TestCloseStalledPublish: Close of a file whose WAL publish is held by a
// stalled store returns (the publish is cancelled after the lease's TTL), and
// what was written replays at the next open.
func TestCloseStalledPublish(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	st := newStallStore(mem)
	o := Options{Params: walParams(segment.FormatStream), FileID: "cp"}
	o.Params.WALLeaseTTL = 300 * time.Millisecond
	f, err := Create(ctx, st, "cp/", o)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(2*4096+7, 2)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil { // starts the publish
		t.Fatal(err)
	}
	watchdog(t, "publish reaching the store", st.stalled)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		f.Close()
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		close(st.release)
		<-closed
		t.Fatal("Close waited for the stalled publish (no answer in 30s)")
	}
	close(st.release)

	g, err := Open(ctx, mem, "cp/", o)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	defer g.Close()
	if g.Size() != int64(len(data)) {
		t.Fatalf("size after reopen %d, want %d", g.Size(), len(data))
	}
	got := make([]byte, len(data))
	if _, err := g.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) {
		t.Fatal("data after reopen differs from what was written")
	}
}
