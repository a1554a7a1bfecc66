package fusefs

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// holdHead holds a GET of a file's head, once armed, until a GET of that
// file's checkpoint 1 part 0 has begun (or 5 s went by): whether the open
// loads the map while it reads the head.
type holdHead struct {
	staging.Store
	mu     sync.Mutex
	armed  bool
	part0  chan struct{} // closed at the first GET of part 0 once armed
	seen   bool          // part 0 was asked for while the head was held
	closed bool
}

func (s *holdHead) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.part0, s.seen, s.closed = true, make(chan struct{}), false, false
}

func (s *holdHead) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.mu.Lock()
	armed, ch := s.armed, s.part0
	if armed && strings.HasSuffix(key, "/0000000001.0") && !s.closed {
		s.closed = true
		close(ch)
	}
	s.mu.Unlock()
	if armed && strings.HasSuffix(key, "/inode") {
		select {
		case <-ch:
			s.mu.Lock()
			s.seen = true
			s.mu.Unlock()
		case <-time.After(5 * time.Second):
		}
	}
	return s.Store.Get(ctx, key, r)
}

// An open for reading of a file whose head this mount has read (a stat)
// loads the map's first objects while it reads the head again; an open for
// writing does not.
func TestOpenForReadingLoadsMapWithHead(t *testing.T) {
	ctx := context.Background()
	st := &holdHead{Store: mem.New()}
	cfg := config.MountDefault(1 << 30)
	cfg.DataBlockSize = 4096 // a map of more than one level in a few MiB
	fsys, n, f := newTestFile(t, st, cfg)
	buf := make([]byte, 8<<20)
	if _, err := f.WriteAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, reading := range []bool{true, false} {
		fsys.mu.Lock()
		fsys.heads.remove(n.FileID) // what a close here left has no hint
		fsys.mu.Unlock()
		h, err := fsys.fetchHead(ctx, n.FileID) // the stat
		if err != nil {
			t.Fatal(err)
		}
		if h.hint.Height < 2 {
			t.Fatalf("map of height %d: want index nodes above the leaves", h.hint.Height)
		}
		st.arm()
		of, _, err := fsys.acquireFile(ctx, n.FileID, reading)
		if err != nil {
			t.Fatal(err)
		}
		st.mu.Lock()
		seen := st.seen
		st.armed = false
		st.mu.Unlock()
		if seen != reading {
			t.Errorf("open (reading %v): part 0 asked for while the head was read: %v", reading, seen)
		}
		if err := fsys.release(ctx, of, false); err != nil {
			t.Fatal(err)
		}
	}
}
