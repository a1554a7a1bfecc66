package namespace

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// hangGuard is how long a test waits for something that must not hang
// before it fails; it only catches a hang and is no timing assertion.
const hangGuard = time.Minute

// landThenInterrupt stores every log entry, then holds the answer until
// release is closed (after the test interrupted the caller) and answers as
// an HTTP client does: with the context's error if it has ended. A change
// whose entry landed while its caller was interrupted.
type landThenInterrupt struct {
	staging.Store
	sent    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *landThenInterrupt) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if _, ok := parseSeq(key, prefix(testRoot)+logDir); !ok {
		return s.Store.Put(ctx, key, data, opts)
	}
	info, err := s.Store.Put(context.WithoutCancel(ctx), key, data, opts)
	if err != nil {
		return info, err
	}
	s.once.Do(func() { close(s.sent) })
	<-s.release
	if err := ctx.Err(); err != nil {
		return staging.ObjectInfo{}, err
	}
	return info, nil
}

// TestChangeInterruptedAfterSendIsFinished: a caller interrupted once its
// entry was sent gets the change's real outcome (it landed), not EINTR.
func TestChangeInterruptedAfterSendIsFinished(t *testing.T) {
	st := &landThenInterrupt{Store: mem.New(), sent: make(chan struct{}), release: make(chan struct{})}
	ns := openNS(t, st, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		n   Node
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
		res <- result{n, err}
	}()
	<-st.sent
	cancel() // the interrupt arrives while the PUT is in flight
	close(st.release)
	var r result
	select {
	case r = <-res:
	case <-time.After(hangGuard):
		t.Fatal("mkdir hangs")
	}
	if r.err != nil {
		t.Fatalf("mkdir whose entry landed reported %v", r.err)
	}
	if got, err := ns.Lookup(context.Background(), RootIno, "d"); err != nil || got.Ino != r.n.Ino {
		t.Fatalf("lookup d: %v %v, want ino %d", got, err, r.n.Ino)
	}
	if n := len(logEntries(t, st.Store)); n != 1 {
		t.Fatalf("%d log entries, want 1", n)
	}
}

// TestChangeCancelledBeforeSendChangesNothing: a caller interrupted before
// anything was sent gets context.Canceled (EINTR), and nothing changed.
func TestChangeCancelledBeforeSendChangesNothing(t *testing.T) {
	mem := mem.New()
	ns := openNS(t, mem, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("mkdir with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := ns.Lookup(context.Background(), RootIno, "d"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("lookup d: %v, want ErrNotExist", err)
	}
	if n := len(logEntries(t, mem)); n != 0 {
		t.Fatalf("%d log entries, want 0", n)
	}
}

// stuckList holds the first List or Get until release is closed: a refresh
// waiting on a store that does not answer (listing the log, or reading the
// entry after its state).
type stuckList struct {
	staging.Store
	mu      sync.Mutex
	stuck   bool
	entered chan struct{}
	release chan struct{}
}

func (s *stuckList) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	s.mu.Lock()
	first := s.stuck
	s.stuck = false
	s.mu.Unlock()
	if first {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return staging.ListPage{}, ctx.Err()
		}
	}
	return s.Store.List(ctx, prefix, startAfter, max)
}

func (s *stuckList) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.mu.Lock()
	first := s.stuck
	s.stuck = false
	s.mu.Unlock()
	if first {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, staging.ObjectInfo{}, ctx.Err()
		}
	}
	return s.Store.Get(ctx, key, r)
}

// TestRefreshStuckDelaysNoChange: a refresh waiting on the store holds no
// lock a change or a read needs.
func TestRefreshStuckDelaysNoChange(t *testing.T) {
	st := &stuckList{Store: mem.New(), entered: make(chan struct{}), release: make(chan struct{})}
	ns := openNS(t, st, Options{})
	st.mu.Lock()
	st.stuck = true
	st.mu.Unlock()
	refreshed := make(chan error, 1)
	go func() { refreshed <- ns.Refresh(context.Background()) }()
	<-st.entered
	made := make(chan error, 1)
	go func() {
		_, err := ns.Create(context.Background(), RootIno, "f", 0o644, Owner{})
		made <- err
	}()
	select {
	case err := <-made:
		if err != nil {
			t.Fatalf("create during a stuck refresh: %v", err)
		}
	case <-time.After(hangGuard):
		close(st.release)
		t.Fatal("create waits for a refresh stuck on the store")
	}
	if _, err := ns.Lookup(context.Background(), RootIno, "f"); err != nil {
		t.Fatalf("lookup f: %v", err)
	}
	close(st.release)
	if err := <-refreshed; err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if _, err := ns.Lookup(context.Background(), RootIno, "f"); err != nil {
		t.Fatalf("lookup f after the refresh: %v", err)
	}
}

// TestChangeOfGoneCallerReturnsAndFinishes: a caller interrupted and gone
// (killed) is answered at once, and its change, already sent, finishes
// without it.
func TestChangeOfGoneCallerReturnsAndFinishes(t *testing.T) {
	st := &landThenInterrupt{Store: mem.New(), sent: make(chan struct{}), release: make(chan struct{})}
	ns := openNS(t, st, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ctx = WithGone(ctx, func() bool { return true })
	res := make(chan error, 1)
	go func() {
		_, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
		res <- err
	}()
	<-st.sent
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("mkdir of a gone caller: %v, want context.Canceled", err)
		}
	case <-time.After(hangGuard):
		close(st.release)
		t.Fatal("mkdir of a gone caller waits for its change")
	}
	close(st.release)
	ns.Wait()
	if _, err := ns.Lookup(context.Background(), RootIno, "d"); err != nil {
		t.Fatalf("lookup d after the change finished: %v", err)
	}
}
