package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

const testRoot = "vol"

// testClock is a clock that moves 1 µs per reading, so that every change has
// its own time.
func testClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return time.Unix(1_700_000_000, n.Add(1000)) }
}

func openNS(t testing.TB, s staging.Store, opts Options) *Namespace {
	t.Helper()
	if opts.Now == nil {
		opts.Now = testClock()
	}
	ns, err := Open(context.Background(), s, testRoot, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return ns
}

// orphans is ns.Orphans, which fails only for the store (never, in v1).
func orphans(t testing.TB, ns *Namespace) []Orphan {
	t.Helper()
	o, err := ns.Orphans(context.Background())
	if err != nil {
		t.Fatalf("Orphans: %v", err)
	}
	return o
}

// orphaned is ns.Orphaned, which fails only for the store (never, in v1).
func orphaned(t testing.TB, ns *Namespace, fileID string) bool {
	t.Helper()
	o, err := ns.Orphaned(context.Background(), fileID)
	if err != nil {
		t.Fatalf("Orphaned %s: %v", fileID, err)
	}
	return o
}

// dump is the canonical form of a namespace's state.
func dump(t testing.TB, ns *Namespace) string {
	t.Helper()
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	b, err := json.Marshal(ns.st.record())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// flakyStore wraps a store: putFault, if set, decides for every Put of a
// log entry whether to fail it before it is stored (drop) or after (lose the
// answer).
type flakyStore struct {
	staging.Store
	mu       sync.Mutex
	putFault func(key string, n int) (apply bool, err error) // n counts log Puts from 1
	logPuts  int
	onResult func(err error) // if set, sees the result of every log Put
}

var errLink = errors.New("connection reset by peer")

func (f *flakyStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	f.mu.Lock()
	fault := f.putFault
	isLog := false
	if _, ok := parseSeq(key, prefix(testRoot)+logDir); ok {
		isLog = true
		f.logPuts++
	}
	n := f.logPuts
	f.mu.Unlock()
	if !isLog || fault == nil {
		return f.Store.Put(ctx, key, data, opts)
	}
	apply, err := fault(key, n)
	if err == nil {
		info, err := f.Store.Put(ctx, key, data, opts)
		if f.onResult != nil {
			f.onResult(err)
		}
		return info, err
	}
	if apply {
		if _, perr := f.Store.Put(ctx, key, data, opts); perr != nil {
			return staging.ObjectInfo{}, perr
		}
	}
	return staging.ObjectInfo{}, err
}

// logEntries returns the entries stored in the log, in order.
func logEntries(t testing.TB, s staging.Store) []*entry {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), s, prefix(testRoot)+logDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*entry
	for _, o := range objs {
		data, _, err := s.Get(context.Background(), o.Key, staging.Whole())
		if err != nil {
			t.Fatal(err)
		}
		e, err := decodeEntry(o.Key, 0, data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func u32(v uint32) *uint32 { return &v }

// fakeClock is a clock for Options.Clock that moves only when told, from
// the real time (so that it compares sensibly with the memory store's
// LastModified).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// pastTrimGrace is more than the default TrimGrace.
const pastTrimGrace = 11 * time.Minute

type runtimeMemStats = runtime.MemStats

// readMemStats reads the heap after a collection, so that only live memory
// counts.
func readMemStats(ms *runtime.MemStats) {
	runtime.GC()
	runtime.ReadMemStats(ms)
}
