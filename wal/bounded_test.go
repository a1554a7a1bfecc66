package wal

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// An owner object larger than any owner is refused with ErrTooLarge naming
// its key, without reading it whole.
func TestLeaseOversizedOwner(t *testing.T) {
	mem := mem.New()
	putOwner(t, mem, bytes.Repeat([]byte{' '}, maxOwnerBytes+1))
	_, err := Open(context.Background(), mem, testPrefix, Options{})
	if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), ownerKey) {
		t.Fatalf("open with an oversized owner: %v, want ErrTooLarge naming %s", err, ownerKey)
	}
}

// hugeStore serves one key as an object of size bytes without holding it:
// each Get makes the bytes of its range, and served counts them.
type hugeStore struct {
	staging.Store
	key    string
	size   int64
	served atomic.Int64
}

func (h *hugeStore) info() staging.ObjectInfo {
	return staging.ObjectInfo{Key: h.key, Size: h.size, ETag: `"huge"`, LastModified: time.Now()}
}

func (h *hugeStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if key != h.key {
		return h.Store.Get(ctx, key, r)
	}
	off, n := r.Off, r.Len
	switch {
	case r.Suffix > 0:
		off, n = max(0, h.size-r.Suffix), min(r.Suffix, h.size)
	case n <= 0 || off+n > h.size:
		n = h.size - off
	}
	if off >= h.size {
		return nil, staging.ObjectInfo{}, staging.ErrInvalidRange
	}
	h.served.Add(n)
	return bytes.Repeat([]byte{'x'}, int(n)), h.info(), nil
}

func (h *hugeStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if key != h.key {
		return h.Store.Head(ctx, key)
	}
	return h.info(), nil
}

// A 600 MiB object where a record or the lease should be is refused with a
// *staging.TooLargeError naming its key, and what was read of it stays
// within the first probe: it is never read whole.
func TestOversizedObjectsBounded(t *testing.T) {
	const size = 600 << 20
	const most = 64 << 10 // GetLimited's first read
	check := func(t *testing.T, h *hugeStore, err error) {
		t.Helper()
		if n := h.served.Load(); n > most {
			t.Fatalf("%d bytes of the object read, want at most %d", n, most)
		}
		var tl *staging.TooLargeError
		if !errors.As(err, &tl) || tl.Key != h.key || tl.Size != size || !strings.Contains(err.Error(), h.key) {
			t.Fatalf("error %v, want a *staging.TooLargeError naming %s", err, h.key)
		}
	}
	t.Run("record", func(t *testing.T) {
		h := &hugeStore{Store: mem.New(), key: RecordKey(testPrefix, 2), size: size}
		_, err := ReadRecord(context.Background(), h, testPrefix, testTag, 2)
		check(t, h, err)
	})
	t.Run("held", func(t *testing.T) {
		h := &hugeStore{Store: mem.New(), key: ownerKey, size: size}
		_, err := Held(context.Background(), h, testPrefix)
		check(t, h, err)
	})
	t.Run("retake", func(t *testing.T) {
		h := &hugeStore{Store: mem.New(), key: testPrefix + "unused", size: size}
		l := openLog(t, h, Options{})
		h.key = ownerKey // the owner object turns huge after Open took it
		_, err := l.retake(context.Background())
		check(t, h, err)
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("retake: %v, want ErrLeaseLost", err)
		}
	})
}

// Ops that would make a record over MaxRecordSize are refused at Append,
// and nothing is stored; BatchBytes over it is refused at Open.
func TestAppendOverMaxRecordSize(t *testing.T) {
	st := mem.New()
	l := openLog(t, st, Options{})
	big := Op{Kind: OpWrite, Data: make([]byte, MaxRecordSize-emptyRecord-OpHeaderSize+1)}
	if _, err := l.Append(context.Background(), []Op{big}); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("append of a record of %d bytes: %v, want ErrRecordTooLarge", EncodedSize([]Op{big}), err)
	}
	if seqs := mustList(t, st); len(seqs) != 0 {
		t.Fatalf("records %v stored after a refused append", seqs)
	}
	big.Data = big.Data[:len(big.Data)-1] // exactly MaxRecordSize: stored and read back
	seq := mustAppend(t, l, big)
	if r, err := l.Read(context.Background(), seq); err != nil || len(r.Ops) != 1 || len(r.Ops[0].Data) != len(big.Data) {
		t.Fatalf("read back a record of MaxRecordSize: %v", err)
	}
	if _, err := Open(context.Background(), mem.New(), testPrefix, Options{BatchBytes: MaxRecordSize + 1}); err == nil {
		t.Fatal("open with BatchBytes over MaxRecordSize succeeded")
	}
}
