package upload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// chunk is the smallest piece every store takes for parts but the last.
const chunk = staging.MinPartSize

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// hooks counts the buffers and bytes an Uploader holds.
type hooks struct {
	bufs, held atomic.Int64
}

func (h *hooks) Hooks() upload.Hooks {
	return upload.Hooks{
		Alloc:   func(n int) []byte { h.bufs.Add(1); return make([]byte, n) },
		Free:    func([]byte) { h.bufs.Add(-1) },
		Hold:    func(n int64) { h.held.Add(n) },
		Release: func(n int64) { h.held.Add(-n) },
	}
}

func (h *hooks) check(t *testing.T) {
	t.Helper()
	if b, n := h.bufs.Load(), h.held.Load(); b != 0 || n != 0 {
		t.Fatalf("after the upload: %d piece buffers and %d bytes still held", b, n)
	}
}

// openUploads is how many multipart uploads the store has open.
func openUploads(t *testing.T, st staging.Store) int {
	t.Helper()
	ups, err := st.ListMultipartUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return len(ups)
}

// stored returns the object at key, or nil if there is none.
func stored(t *testing.T, st staging.Store, key string) []byte {
	t.Helper()
	b, _, err := st.Get(context.Background(), key, staging.Whole())
	if errors.Is(err, staging.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rig is an Uploader over the memory store behind the fault store (rule,
// if set) behind a counter.
type rig struct {
	ms *mem.Store
	cs *counting.Store
	u  *upload.Uploader
}

func newRig(rule *faulty.Rule, concurrency int) rig {
	ms := mem.New()
	fs := faulty.New(ms, 1)
	if rule != nil {
		fs.Add(*rule)
	}
	cs := counting.New(fs)
	return rig{ms: ms, cs: cs, u: upload.New(upload.Config{Store: cs, Concurrency: concurrency, ChunkSize: chunk})}
}

// check asserts what the store holds after an upload of key: want (nil:
// no object), no upload left open, and reqs counted every request.
func (r rig) check(t *testing.T, key string, want []byte, reqs *atomic.Int64) {
	t.Helper()
	got := stored(t, r.ms, key)
	if (got != nil) != (want != nil) || !bytes.Equal(got, want) {
		t.Fatalf("object stored: %d bytes, want %d (stored: %v)", len(got), len(want), want != nil)
	}
	if n := openUploads(t, r.ms); n != 0 {
		t.Fatalf("%d uploads left open", n)
	}
	if got, saw := reqs.Load(), r.cs.Snapshot().Total().Requests; got != saw {
		t.Fatalf("requests: counted %d, the store saw %d", got, saw)
	}
}

func TestPut(t *testing.T) {
	cases := []struct {
		name string
		size int
		reqs int64 // requests made
	}{
		{"empty", 0, 1},
		{"one block", 4 << 10, 1},
		{"one piece", chunk, 1},
		{"a piece and a byte", chunk + 1, 1 + 2 + 1},
		{"three pieces", 2*chunk + 100, 1 + 3 + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := mem.New()
			cs := counting.New(ms)
			var h hooks
			u := upload.New(upload.Config{Store: cs, Concurrency: 2, ChunkSize: chunk, Hooks: h.Hooks()})
			body := pattern(c.size, 1)
			var reqs atomic.Int64
			if err := u.Put(context.Background(), "f/1.1", upload.Bytes(body), &reqs); err != nil {
				t.Fatal(err)
			}
			h.check(t)
			if got := stored(t, ms, "f/1.1"); !bytes.Equal(got, body) {
				t.Fatalf("stored %d bytes, not the %d put", len(got), len(body))
			}
			info, err := ms.Head(context.Background(), "f/1.1")
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Metadata[upload.WriteIDMeta]) != 32 {
				t.Fatalf("no write id on the object: %v", info.Metadata)
			}
			if got, saw := reqs.Load(), cs.Snapshot().Total().Requests; got != c.reqs || saw != c.reqs {
				t.Fatalf("requests: counted %d, the store saw %d, want %d", got, saw, c.reqs)
			}
			if n := openUploads(t, ms); n != 0 {
				t.Fatalf("%d uploads left open", n)
			}
		})
	}
}

// TestPutFaults fails one request of a Put, by an error or by an answer
// lost after the store applied it, at every request a Put makes.
func TestPutFaults(t *testing.T) {
	type want struct {
		err    bool // Put fails
		object bool // the object is stored
		open   int  // uploads left open (for the cleaner)
	}
	type tcase struct {
		name string
		size int
		rule faulty.Rule
		want want
	}
	cases := []tcase{
		{"put error", 100, faulty.Rule{Op: staging.OpPut, Kind: faulty.Error}, want{err: true}},
		{"put lost", 100, faulty.Rule{Op: staging.OpPut, Kind: faulty.LostAnswer}, want{object: true}},
		{"create error", 2*chunk + 1, faulty.Rule{Op: staging.OpCreateMultipart, Kind: faulty.Error}, want{err: true}},
		// The upload id never came back: nothing can abort it.
		{"create lost", 2*chunk + 1, faulty.Rule{Op: staging.OpCreateMultipart, Kind: faulty.LostAnswer}, want{err: true, open: 1}},
		{"complete error", 2*chunk + 1, faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.Error}, want{err: true}},
		{"complete lost", 2*chunk + 1, faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.LostAnswer}, want{object: true}},
		// The check after a lost answer fails too: the error stands.
		{"put lost, head error", 100, faulty.Rule{Op: staging.OpPut, Kind: faulty.LostAnswer}, want{err: true, object: true}},
	}
	// Each part of three, by an error or a lost answer: a part stored
	// whose answer was lost is not known to be stored, so the upload is
	// aborted either way.
	for n := 1; n <= 3; n++ {
		for _, k := range []faulty.Kind{faulty.Error, faulty.LostAnswer} {
			cases = append(cases, tcase{fmt.Sprintf("part %d %v", n, k), 2*chunk + 1,
				faulty.Rule{Op: staging.OpUploadPart, Nth: n, Kind: k}, want{err: true}})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := mem.New()
			fs := faulty.New(ms, 1)
			fs.Add(c.rule)
			if c.name == "put lost, head error" {
				fs.Add(faulty.Rule{Op: staging.OpHead, Kind: faulty.Error})
			}
			var h hooks
			u := upload.New(upload.Config{Store: fs, Concurrency: 3, ChunkSize: chunk, Hooks: h.Hooks()})
			body := pattern(c.size, 2)
			err := u.Put(context.Background(), "f/1.1", upload.Bytes(body), nil)
			h.check(t)
			if (err != nil) != c.want.err {
				t.Fatalf("Put: %v, want an error: %v", err, c.want.err)
			}
			if err != nil && !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("Put: %v, not the fault's error", err)
			}
			if errors.Is(err, upload.ErrNameTaken) {
				t.Fatalf("Put: %v: the name is not taken", err)
			}
			got := stored(t, ms, "f/1.1")
			if (got != nil) != c.want.object || got != nil && !bytes.Equal(got, body) {
				t.Fatalf("object stored: %d bytes, want it: %v", len(got), c.want.object)
			}
			if n := openUploads(t, ms); n != c.want.open {
				t.Fatalf("%d uploads left open, want %d", n, c.want.open)
			}
			if fs.Injected() == 0 {
				t.Fatal("no fault injected")
			}
		})
	}
}

// TestAbortFaults: an abort that fails leaves the upload for the cleaner,
// and the Put's error is the failure that made it abort.
func TestAbortFaults(t *testing.T) {
	for _, c := range []struct {
		kind faulty.Kind
		open int
	}{{faulty.Error, 1}, {faulty.LostAnswer, 0}} {
		t.Run(c.kind.String(), func(t *testing.T) {
			ms := mem.New()
			fs := faulty.New(ms, 1)
			fs.Add(faulty.Rule{Op: staging.OpUploadPart, Nth: 2, Kind: faulty.Error})
			fs.Add(faulty.Rule{Op: staging.OpAbortMultipart, Kind: c.kind})
			u := upload.New(upload.Config{Store: fs, Concurrency: 2, ChunkSize: chunk})
			err := u.Put(context.Background(), "f/1.1", upload.Bytes(pattern(2*chunk, 3)), nil)
			if !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("Put: %v, want the part's injected error", err)
			}
			if fs.Injected() != 2 {
				t.Fatalf("%d faults injected, want the part's and the abort's", fs.Injected())
			}
			if n := openUploads(t, ms); n != c.open {
				t.Fatalf("%d uploads left open, want %d", n, c.open)
			}
		})
	}
}

// TestNameTaken: an object already there under another write id takes
// the name, whole or multipart; the upload is aborted.
func TestNameTaken(t *testing.T) {
	for _, size := range []int{100, chunk + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ms := mem.New()
			if _, err := ms.Put(context.Background(), "f/1.1", []byte("theirs"), staging.PutOptions{
				Metadata: map[string]string{upload.WriteIDMeta: "theirs"}}); err != nil {
				t.Fatal(err)
			}
			u := upload.New(upload.Config{Store: ms, Concurrency: 2, ChunkSize: chunk})
			err := u.Put(context.Background(), "f/1.1", upload.Bytes(pattern(size, 4)), nil)
			if !errors.Is(err, upload.ErrNameTaken) || !errors.Is(err, staging.ErrPrecondition) {
				t.Fatalf("Put: %v, want the name taken", err)
			}
			if got := stored(t, ms, "f/1.1"); string(got) != "theirs" {
				t.Fatalf("their object became %q", got)
			}
			if n := openUploads(t, ms); n != 0 {
				t.Fatalf("%d uploads left open", n)
			}
		})
	}
}

// cutShort stores the first half of every Put and fails it: a server that
// kept what it received of a request that broke off.
type cutShort struct{ staging.Store }

var errBroke = errors.New("connection broke")

func (s cutShort) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	_, _ = s.Store.Put(ctx, key, data[:len(data)/2], opts)
	return staging.ObjectInfo{}, errBroke
}

// TestCutShort: our own write id on an object shorter than ours is not a
// landed write: the name is taken, and the cause is kept.
func TestCutShort(t *testing.T) {
	u := upload.New(upload.Config{Store: cutShort{mem.New()}, Concurrency: 1, ChunkSize: chunk})
	err := u.Put(context.Background(), "f/1.1", upload.Bytes(pattern(100, 5)), nil)
	if !errors.Is(err, upload.ErrNameTaken) || !errors.Is(err, errBroke) {
		t.Fatalf("Put: %v, want the name taken by a write cut short", err)
	}
}

// TestMultipart builds an object piece by piece, as sending ahead does,
// with a fault at each of its requests.
func TestMultipart(t *testing.T) {
	cases := []struct {
		name   string
		rule   *faulty.Rule
		err    staging.Op // the request whose error the build meets (OpAny: none)
		object bool
	}{
		{"no fault", nil, staging.OpAny, true},
		{"create error", &faulty.Rule{Op: staging.OpCreateMultipart, Kind: faulty.Error}, staging.OpCreateMultipart, false},
		{"part 1 error", &faulty.Rule{Op: staging.OpUploadPart, Nth: 1, Kind: faulty.Error}, staging.OpUploadPart, false},
		{"part 2 lost", &faulty.Rule{Op: staging.OpUploadPart, Nth: 2, Kind: faulty.LostAnswer}, staging.OpUploadPart, false},
		{"complete error", &faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.Error}, staging.OpCompleteMultipart, false},
		{"complete lost", &faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.LostAnswer}, staging.OpAny, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(c.rule, 2)
			u := r.u
			ctx := context.Background()
			var reqs atomic.Int64
			p1, p2 := pattern(chunk, 6), pattern(1000, 7)
			// build stops at the first failure, as the sender gives an
			// object up, and says which request failed.
			build := func() (staging.Op, error) {
				m := u.Create("f/2.1")
				if m.Key() != "f/2.1" {
					t.Fatalf("upload of %q", m.Key())
				}
				n1, n2 := m.Reserve(), m.Reserve()
				if n1 != 1 || n2 != 2 {
					t.Fatalf("parts numbered %d and %d", n1, n2)
				}
				kept, err := m.PartGiven(ctx, n1, p1, &reqs)
				if err != nil {
					m.Abort(ctx, &reqs)
					if strings.Contains(err.Error(), "create upload of f/2.1") {
						return staging.OpCreateMultipart, err // the first part creates the upload
					}
					return staging.OpUploadPart, err
				}
				if !kept {
					t.Fatal("the memory store did not keep a part given up")
				}
				if err := m.Part(ctx, n2, p2, &reqs); err != nil {
					m.Abort(ctx, &reqs)
					return staging.OpUploadPart, err
				}
				if err := m.Complete(ctx, &reqs); err != nil {
					m.Abort(ctx, &reqs)
					m.Abort(ctx, &reqs) // once only
					return staging.OpCompleteMultipart, err
				}
				return staging.OpAny, nil
			}
			op, err := build()
			if op != c.err || (err != nil) != (c.err != staging.OpAny) {
				t.Fatalf("failed at %v with %v, want a failure at %v", op, err, c.err)
			}
			var want []byte
			if c.object {
				want = slices.Concat(p1, p2)
			}
			r.check(t, "f/2.1", want, &reqs)
			if n := r.cs.Snapshot().Op(staging.OpAbortMultipart).Requests; n > 1 {
				t.Fatalf("%d aborts of one upload", n)
			}
		})
	}
}

// cancelAt cancels the upload's context when a request of op begins, and
// fails that request as a cancelled one does.
type cancelAt struct {
	staging.Store
	op     staging.Op
	cancel context.CancelFunc
}

func (s *cancelAt) UploadPart(ctx context.Context, key, id string, n int32, data []byte) (string, error) {
	if s.op == staging.OpUploadPart && n == 2 {
		s.cancel()
		return "", ctx.Err()
	}
	return s.Store.UploadPart(ctx, key, id, n, data)
}

func (s *cancelAt) CompleteMultipart(ctx context.Context, key, id string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if s.op == staging.OpCompleteMultipart {
		s.cancel()
		return staging.ObjectInfo{}, ctx.Err()
	}
	return s.Store.CompleteMultipart(ctx, key, id, parts, cond)
}

// TestCancelAborts: an upload whose context ends midway is aborted all the
// same, on a context of its own.
func TestCancelAborts(t *testing.T) {
	for _, op := range []staging.Op{staging.OpUploadPart, staging.OpCompleteMultipart} {
		t.Run(op.String(), func(t *testing.T) {
			ms := mem.New()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var h hooks
			u := upload.New(upload.Config{Store: &cancelAt{Store: ms, op: op, cancel: cancel},
				Concurrency: 1, ChunkSize: chunk, Hooks: h.Hooks()})
			err := u.Put(ctx, "f/1.1", upload.Bytes(pattern(3*chunk, 8)), nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put: %v, want it cancelled", err)
			}
			h.check(t)
			if n := openUploads(t, ms); n != 0 {
				t.Fatalf("%d uploads left open after a cancel", n)
			}
			if got := stored(t, ms, "f/1.1"); got != nil {
				t.Fatalf("a cancelled upload stored %d bytes", len(got))
			}
		})
	}
}

// gate counts the requests in flight at once, and holds each gated request
// until another request found every slot of the uploader taken and the
// requests holding them are all in flight (or every gated request expected
// has begun): a cap the uploader does not keep shows as more in flight,
// one it does not use fully as fewer, and no timing is involved. (The
// requests these tests gate are the only ones in flight while any is.)
type gate struct {
	staging.Store
	cap, expect int

	mu             sync.Mutex
	cond           *sync.Cond
	inflight, most int
	started        int
	held           int // slots taken when a request found none free; 0 before
	// free: every request from now on must find a slot free (refused
	// counts those that did not).
	free    bool
	refused int
}

func newGate(st staging.Store, cap, expect int) *gate {
	g := &gate{Store: st, cap: cap, expect: expect}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// enter counts a request in; a gated one waits for the others.
func (g *gate) enter(gated bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight++
	g.most = max(g.most, g.inflight)
	if !gated {
		return
	}
	g.started++
	g.cond.Broadcast()
	for g.started < g.expect && (g.held == 0 || g.inflight < g.held) {
		g.cond.Wait()
	}
}

// waiting is the Uploader's: a request found every slot taken.
func (g *gate) waiting(held int) {
	g.mu.Lock()
	if g.free {
		g.refused++
	}
	g.held = held
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	g.inflight--
	g.mu.Unlock()
}

func (g *gate) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	g.enter(true)
	defer g.leave()
	return g.Store.Put(ctx, key, data, opts)
}

func (g *gate) UploadPart(ctx context.Context, key, id string, n int32, data []byte) (string, error) {
	g.enter(true)
	defer g.leave()
	return g.Store.UploadPart(ctx, key, id, n, data)
}

func (g *gate) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	g.enter(false)
	defer g.leave()
	return g.Store.CreateMultipart(ctx, key, opts)
}

// CompleteMultipart takes parts of any size: the pieces of these tests
// are small.
func (g *gate) CompleteMultipart(ctx context.Context, key, id string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	g.enter(false)
	defer g.leave()
	return staging.ObjectInfo{}, g.Store.AbortMultipart(ctx, key, id)
}

// TestCap: the requests in flight never exceed the cap, and reach it.
func TestCap(t *testing.T) {
	const piece = 1 << 10
	cases := []struct {
		name  string
		cap   int
		gated int
		run   func(ctx context.Context, u *upload.Uploader) error
	}{
		{"put of many pieces, cap 3", 3, 8, func(ctx context.Context, u *upload.Uploader) error {
			return u.Put(ctx, "f/1.1", upload.Bytes(pattern(8*piece, 1)), nil)
		}},
		{"put of many pieces, cap 1", 1, 5, func(ctx context.Context, u *upload.Uploader) error {
			return u.Put(ctx, "f/1.1", upload.Bytes(pattern(5*piece-1, 1)), nil)
		}},
		{"many objects at once, cap 4", 4, 10, func(ctx context.Context, u *upload.Uploader) error {
			objs := make([]upload.Item, 10)
			for i := range objs {
				objs[i] = upload.Item{Key: fmt.Sprintf("f/1.%d", i+1), Body: upload.Bytes(pattern(100, byte(i)))}
			}
			return errors.Join(u.PutAll(ctx, objs, nil)...)
		}},
		{"parts of one upload from many goroutines, cap 2", 2, 6, func(ctx context.Context, u *upload.Uploader) error {
			m := u.Create("f/1.1")
			errs := make([]error, 6)
			var wg sync.WaitGroup
			for i := range errs {
				n := m.Reserve()
				wg.Go(func() { errs[i] = m.Part(ctx, n, pattern(piece, byte(i)), nil) })
			}
			wg.Wait()
			m.Abort(ctx, nil)
			return errors.Join(errs...)
		}},
		{"started puts, cap 2", 2, 5, func(ctx context.Context, u *upload.Uploader) error {
			var waits []func() error
			for i := range 5 {
				waits = append(waits, u.Start(ctx, fmt.Sprintf("f/1.%d", i+1), upload.Bytes(pattern(100, byte(i))), nil))
			}
			u.Wait()
			var errs []error
			for _, w := range waits {
				errs = append(errs, w())
			}
			return errors.Join(errs...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGate(mem.New(), c.cap, c.gated)
			u := upload.New(upload.Config{Store: g, Concurrency: c.cap, ChunkSize: piece})
			upload.SetWaiting(u, g.waiting)
			if err := c.run(context.Background(), u); err != nil {
				t.Fatal(err)
			}
			if g.started != c.gated {
				t.Fatalf("%d gated requests, want %d", g.started, c.gated)
			}
			if g.most != c.cap {
				t.Fatalf("at most %d requests in flight, want the cap, %d", g.most, c.cap)
			}
		})
	}
}

// TestCompleteMissingPart: an upload with a part reserved and not stored
// (its request failed, or was never made) does not complete, and makes no
// request trying.
func TestCompleteMissingPart(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(ctx context.Context, m *upload.Multipart) error // the parts
	}{
		{"never sent", func(ctx context.Context, m *upload.Multipart) error {
			m.Reserve()
			n := m.Reserve()
			return m.Part(ctx, n, []byte("last"), nil)
		}},
		{"failed", func(ctx context.Context, m *upload.Multipart) error {
			if err := m.Part(ctx, m.Reserve(), pattern(chunk, 1), nil); err != nil {
				return err
			}
			if err := m.Part(ctx, m.Reserve(), []byte("last"), nil); !errors.Is(err, faulty.ErrInjected) {
				return fmt.Errorf("part 2: %v, want the fault", err)
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms := mem.New()
			fs := faulty.New(ms, 1)
			fs.Add(faulty.Rule{Op: staging.OpUploadPart, Nth: 2, Kind: faulty.Error})
			cs := counting.New(fs)
			u := upload.New(upload.Config{Store: cs, Concurrency: 1, ChunkSize: chunk})
			ctx := context.Background()
			m := u.Create("f/1.1")
			if err := c.run(ctx, m); err != nil {
				t.Fatal(err)
			}
			before := cs.Snapshot()
			if err := m.Complete(ctx, nil); err == nil {
				t.Fatal("an upload missing a part completed")
			}
			if n := cs.Snapshot().Sub(before).Total().Requests; n != 0 {
				t.Fatalf("%d requests to complete an upload missing a part", n)
			}
			if got := stored(t, ms, "f/1.1"); got != nil {
				t.Fatalf("%d bytes stored", len(got))
			}
		})
	}
}

// TestCreateMakesNoRequest: Create makes no request (the engine begins an
// upload holding its file's lock, under which no request is made); the
// first part creates the store's upload, once for parts sent at once; an
// upload aborted before any part makes no request, and none after.
func TestCreateMakesNoRequest(t *testing.T) {
	ctx := context.Background()
	ms := mem.New()
	cs := counting.New(ms)
	u := upload.New(upload.Config{Store: cs, Concurrency: 4, ChunkSize: chunk})
	requests := func() int64 { return cs.Snapshot().Total().Requests }

	m := u.Create("f/1.1")
	if n := requests(); n != 0 {
		t.Fatalf("Create made %d requests", n)
	}
	parts := [][]byte{pattern(chunk, 1), pattern(chunk, 2), pattern(10, 3)}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		n := m.Reserve()
		wg.Go(func() { errs[i] = m.Part(ctx, n, p, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := m.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := requests(); n != int64(len(parts))+2 {
		t.Fatalf("%d requests for %d parts, want one create, the parts and one complete", n, len(parts))
	}
	if got := stored(t, ms, "f/1.1"); !bytes.Equal(got, slices.Concat(parts...)) {
		t.Fatalf("stored %d bytes, not the parts", len(got))
	}

	before := requests()
	a := u.Create("f/1.2")
	a.Abort(ctx, nil)
	if err := a.Part(ctx, a.Reserve(), pattern(10, 4), nil); err == nil {
		t.Fatal("a part of an aborted upload was stored")
	}
	if n := requests() - before; n != 0 {
		t.Fatalf("an upload aborted before its first part made %d requests", n)
	}
	if ups, err := ms.ListMultipartUploads(ctx, "f/"); err != nil || len(ups) != 0 {
		t.Fatalf("uploads left open: %v, %v", ups, err)
	}
}
