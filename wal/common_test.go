package wal

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
)

const testPrefix = "vol/f/abc/"

var testTag = segment.FileTag("abc")

// openLog opens a log on st under testPrefix and closes it at the end of the
// test (a second Close is harmless).
func openLog(t *testing.T, st staging.Store, o Options) *Log {
	t.Helper()
	if o.Tag == 0 {
		o.Tag = testTag
	}
	l, err := Open(context.Background(), st, testPrefix, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func mustList(t *testing.T, st staging.Store) []uint64 {
	t.Helper()
	seqs, err := List(context.Background(), st, testPrefix)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return seqs
}

func mustAppend(t *testing.T, l *Log, ops ...Op) uint64 {
	t.Helper()
	seq, err := l.Append(context.Background(), ops)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return seq
}

func writeOp(off int64, s string) Op {
	return Op{Kind: OpWrite, Off: off, Data: []byte(s), MtimeNs: 1_700_000_000_000_000_000 + off}
}

// waitFor polls cond until it holds; the deadline only stops a test that
// would otherwise hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// norm is op as Decode returns it after Encode.
func norm(op Op) Op {
	switch op.Kind {
	case OpWrite:
		op.Len = int64(len(op.Data))
	case OpTruncate:
		op.Len, op.Data = 0, nil
	case OpMtime:
		op.Off, op.Len, op.Data = 0, 0, nil
	case OpZero:
		op.Data = nil
	}
	return op
}

func opsEqual(a, b []Op) bool {
	return slices.EqualFunc(a, b, func(x, y Op) bool {
		return x.Kind == y.Kind && x.Off == y.Off && x.Len == y.Len && x.MtimeNs == y.MtimeNs && bytes.Equal(x.Data, y.Data)
	})
}

// equalOwner compares owners; a zero Version is the one encodeOwner writes.
func equalOwner(a, b OwnerInfo) bool {
	v := func(n int) int {
		if n == 0 {
			return OwnerVersion
		}
		return n
	}
	return v(a.Version) == v(b.Version) && a.Writer == b.Writer && a.Host == b.Host && a.PID == b.PID && a.PIDNS == b.PIDNS &&
		a.Start == b.Start && a.Boot == b.Boot && a.Expires.Equal(b.Expires) && a.Closing == b.Closing
}

// isRecordKey reports whether key is a record (not the owner).
func isRecordKey(key string) bool {
	i := strings.LastIndex(key, "/"+Dir)
	if i < 0 {
		return false
	}
	_, ok := ParseRecordName(key[i+1+len(Dir):])
	return ok
}

// gateStore holds every record PUT until the gate opens, and says when one
// started: tests arrange what is queued behind a PUT in flight.
type gateStore struct {
	staging.Store
	open    chan struct{}
	started chan string
}

func newGate(inner staging.Store) *gateStore {
	return &gateStore{Store: inner, open: make(chan struct{}), started: make(chan string, 1024)}
}

func (g *gateStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if isRecordKey(key) {
		g.started <- key
		<-g.open
	}
	return g.Store.Put(ctx, key, data, opts)
}

// retryStore retries a Put that failed with a server error, as the S3
// client's retryer does: a lost answer then comes back as a precondition
// failure of the retry.
type retryStore struct {
	staging.Store
	attempts int
}

func (r *retryStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	var err error
	for range r.attempts {
		var info staging.ObjectInfo
		info, err = r.Store.Put(ctx, key, data, opts)
		if !errors.Is(err, faulty.ErrInjected) {
			return info, err
		}
	}
	return staging.ObjectInfo{}, err
}

// queuedOps counts the ops waiting in batches not yet sent.
func queuedOps(l *Log) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, b := range l.pending {
		n += len(b.ops)
	}
	return n
}
