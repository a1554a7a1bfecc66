package limit_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/limit"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

func TestLimitContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store { return limit.New(mem.New(), 4) })
}

// slow is a store whose every request takes a while and records the most
// requests it had in flight at once; gate, when set, holds requests until
// it is closed.
type slow struct {
	staging.Store
	delay         time.Duration
	gate          chan struct{}
	entered       chan struct{}
	inFlight, max atomic.Int64
}

func (s *slow) enter() func() {
	n := s.inFlight.Add(1)
	for {
		m := s.max.Load()
		if n <= m || s.max.CompareAndSwap(m, n) {
			break
		}
	}
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	time.Sleep(s.delay)
	return func() { s.inFlight.Add(-1) }
}

func (s *slow) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	defer s.enter()()
	return s.Store.Put(ctx, key, data, opts)
}

func (s *slow) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	defer s.enter()()
	return s.Store.Get(ctx, key, r)
}

func (s *slow) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	defer s.enter()()
	return s.Store.Head(ctx, key)
}

func (s *slow) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	defer s.enter()()
	return s.Store.UploadPart(ctx, key, uploadID, n, data)
}

// 100 callers at once, of several operations, never have more than the cap
// in flight, and do reach it.
func TestLimitCapHolds(t *testing.T) {
	for _, max := range []int{1, 3, 8} {
		inner := &slow{Store: mem.New(), delay: 2 * time.Millisecond}
		st := limit.New(inner, max)
		ctx := t.Context()
		id, err := st.CreateMultipart(ctx, "mpu", staging.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				switch i % 4 {
				case 0:
					_, err = st.Put(ctx, "k", []byte("v"), staging.PutOptions{})
				case 1:
					_, _, err = st.Get(ctx, "k", staging.Whole())
				case 2:
					_, err = st.Head(ctx, "k")
				case 3:
					_, err = st.UploadPart(ctx, "mpu", id, int32(i/4+1), []byte("p"))
				}
				if err != nil && !errors.Is(err, staging.ErrNotFound) {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := inner.max.Load(); got > int64(max) || got < int64(max) {
			t.Errorf("max %d: %d requests in flight at most, want exactly the cap", max, got)
		}
	}
}

// A request waiting for a slot gives up when its context ends, promptly,
// with the context's error and what it was doing; it never reaches the
// store, and the slot holder finishes unharmed.
func TestLimitCancelledWaiter(t *testing.T) {
	inner := &slow{Store: mem.New(), gate: make(chan struct{}), entered: make(chan struct{}, 2)}
	st := limit.New(inner, 1)
	held := make(chan error, 1)
	go func() {
		_, err := st.Put(context.Background(), "a", []byte("x"), staging.PutOptions{})
		held <- err
	}()
	<-inner.entered // the one slot is taken

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := st.Put(ctx, "b", []byte("y"), staging.PutOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a request beyond the cap returned before a slot was free: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
		if want := "put b: wait for one of max_requests=1 slots: context canceled"; err.Error() != want {
			t.Fatalf("cancelled waiter: %q, want %q", err, want)
		}
	case <-time.After(time.Second):
		t.Fatal("cancelled waiter still waiting after 1s")
	}
	close(inner.gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if _, err := inner.Head(context.Background(), "b"); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("the cancelled request reached the store: head b: %v", err)
	}
	// The slot is free again.
	if _, err := st.Put(t.Context(), "c", []byte("z"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Answers and errors come back as the store gave them.
func TestLimitPassesThrough(t *testing.T) {
	inner := mem.New()
	st := limit.New(inner, 2)
	ctx := t.Context()
	put, err := st.Put(ctx, "k", []byte("hello"), staging.PutOptions{Metadata: map[string]string{"m": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	head, err := inner.Head(ctx, "k")
	if err != nil || head.ETag != put.ETag || head.Size != 5 || head.Metadata["m"] != "1" {
		t.Fatalf("put answered %+v; the store has %+v (%v)", put, head, err)
	}
	got, info, err := st.Get(ctx, "k", staging.Bytes(1, 3))
	if err != nil || !bytes.Equal(got, []byte("ell")) || info.ETag != put.ETag || info.Size != 5 {
		t.Fatalf("get: %q %+v %v", got, info, err)
	}
	page, err := st.List(ctx, "", "", 0)
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "k" {
		t.Fatalf("list: %+v %v", page, err)
	}
	errCases := []struct {
		name string
		do   func() error
		want error
	}{
		{"get missing", func() error { _, _, err := st.Get(ctx, "missing", staging.Whole()); return err }, staging.ErrNotFound},
		{"head missing", func() error { _, err := st.Head(ctx, "missing"); return err }, staging.ErrNotFound},
		{"create over", func() error {
			_, err := st.Put(ctx, "k", []byte("x"), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
			return err
		}, staging.ErrPrecondition},
		{"bad key", func() error { return st.Delete(ctx, "../x") }, staging.ErrInvalidKey},
		{"abort unknown", func() error { return st.AbortMultipart(ctx, "k", "nope") }, staging.ErrNotFound},
	}
	for _, c := range errCases {
		err := c.do()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// An error is the store's own, not rewrapped.
	_, innerErr := inner.Head(ctx, "missing")
	_, limErr := st.Head(ctx, "missing")
	if innerErr.Error() != limErr.Error() {
		t.Errorf("head missing: %q through the limit, %q from the store", limErr, innerErr)
	}
}
