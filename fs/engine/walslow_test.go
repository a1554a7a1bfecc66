package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/limit"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// slowStore delays every request, before and after it, by up to max each.
type slowStore struct {
	staging.Store
	max time.Duration
}

func (s *slowStore) delay() { time.Sleep(rand.N(s.max)) }

func (s *slowStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	s.delay()
	defer s.delay()
	return s.Store.Put(ctx, key, data, o)
}

func (s *slowStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.delay()
	return s.Store.Get(ctx, key, r)
}

func (s *slowStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	s.delay()
	return s.Store.Head(ctx, key)
}

func (s *slowStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	s.delay()
	return s.Store.List(ctx, prefix, startAfter, max)
}

func (s *slowStore) Delete(ctx context.Context, key string) error {
	s.delay()
	return s.Store.Delete(ctx, key)
}

// A WAL writer on a slow store, one request at a time (max_requests=1),
// appends numbered 8-byte records to a file and flushes now and then; its
// renewals wait behind its other requests, so its short lease often
// expires. Another writer opens the file every 50 ms, writes at offset 0
// and closes: it takes the lease whenever it expired, publishes, lets it
// go. A writer whose lease is lost for good opens the file again and goes
// on. Every record whose write was acknowledged must be in the file at the
// end. Randomized (the delays); what it checks does not depend on timing.
// Before, records the writer acknowledged after the other had taken the
// lease (its renewals had not got through to tell it) reused record
// numbers the other's checkpoint already held, whose records it had
// deleted: 10 to 21 of some 25 acknowledged were lost, in runs, each time.
func TestWALSlowHolderKeepsAcknowledged(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	const prefix = "sh/"
	o := Options{Params: walParams(segment.FormatStream), FileID: prefix}
	o.Params.WALLeaseTTL = 300 * time.Millisecond
	slow := limit.New(&slowStore{Store: st, max: 60 * time.Millisecond}, 1)
	l, err := Create(ctx, slow, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	other := o
	other.Params.WALLeaseTTL = 30 * time.Second
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			f, err := Open(ctx, st, prefix, other)
			if err != nil {
				continue
			}
			_, _ = f.WriteAt(ctx, []byte("OTHER"), 0) // EBUSY while the writer holds the lease
			f.Close()
		}
	}()
	var acked []uint64
	failed, reopens := 0, 0
	runFor := 4 * time.Second
	if testing.Short() {
		runFor = time.Second
	}
	for i, end := uint64(1), time.Now().Add(runFor); time.Now().Before(end); i++ {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], i)
		_, err := l.WriteAt(ctx, b[:], int64(8*i))
		switch {
		case err == nil:
			acked = append(acked, i)
		case errors.Is(err, wal.ErrLeaseLost) || errors.Is(err, wal.ErrTaken):
			failed++
			l.Close()
			reopens++
			for l, err = Open(ctx, slow, prefix, o); err != nil; l, err = Open(ctx, slow, prefix, o) {
				time.Sleep(5 * time.Millisecond)
			}
		default:
			failed++
			time.Sleep(5 * time.Millisecond)
		}
		if i%7 == 0 {
			_, _ = l.Flush(ctx)
		}
	}
	close(stop)
	wg.Wait()
	l.Close()

	r, err := Open(ctx, st, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAll(t, r)
	var lost []uint64
	for _, i := range acked {
		if off := 8 * i; off+8 > uint64(len(got)) || binary.LittleEndian.Uint64(got[off:]) != i {
			lost = append(lost, i)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged records lost: %v", len(lost), len(acked), lost)
	}
	t.Logf("%d records acknowledged, %d writes failed, %d reopens", len(acked), failed, reopens)
}
