package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"ckptfs/staging"
)

// stallStore holds every store of a data object (not the head) until
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
	if strings.HasSuffix(key, "/"+HeadKey) {
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
	mem := staging.NewMem()
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
