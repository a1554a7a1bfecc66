// Package upload stores the objects of one file's engine: whole, in one
// request, or as a multipart upload of pieces, under one cap on the
// requests in flight (segment_mpu_max_concurrency).
//
// Every object is created with If-None-Match: * and carries a write id in
// its metadata (WriteIDMeta), so that a failed create is told apart: if
// the object now there carries this write's id and its size, the request
// landed and only its answer was lost, and the create succeeded; if
// another id is there, or ours on an object cut short, the name is taken
// (ErrNameTaken) and the caller moves on to new names; otherwise the error
// stands. A multipart upload that fails is aborted, also when its context
// was cancelled (briefly, on a context of its own); an abort that fails
// leaves the upload to the cleaner.
//
// The engine uses it two ways: a flush (and a WAL publish, a copy's part 0)
// puts an object whole with Put, which decides between one PUT and a
// multipart upload by size and sends the pieces in parallel; sending ahead
// builds a multipart object piece by piece (Create, then a Multipart's
// Reserve and PartGiven) or sends one whole (PutGiven), in tasks (Tasks)
// of an Object (object.go), which completes it once it is closed and every
// piece is stored, aborts it if it failed, and says when it is finished.
// The Uploader knows nothing of the file: it takes no lock of the
// engine's, and the engine applies what a finished object means (which of
// its blocks are stored where) under its own lock.
//
// Every request holds one slot of the cap while it is made (those beyond it
// wait for a slot, or for their context to end); a request never waits for
// a second slot while it holds one, so uploads that share the cap cannot
// wait on each other. Goroutines: Put's pieces run in goroutines that Put
// waits for; Start runs a Put in a goroutine that Wait waits for; Tasks
// (tasks.go) runs an owner's tasks, each holding one slot for its whole
// run, and hands their results back to the owner, whose Stop waits for
// them.
package upload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// WriteIDMeta is the metadata key of an object's write id.
const WriteIDMeta = "ckptfs-write"

// ErrNameTaken: an object's name is taken by another writer (or by a write
// of ours cut short); the caller moves on to new names.
var ErrNameTaken = errors.New("object name taken by another writer")

// abortTimeout bounds an abort, which runs on a context of its own.
const abortTimeout = 30 * time.Second

// NewWriteID returns a fresh write id.
func NewWriteID() string {
	return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
}

// Body is an object's bytes, copied out one piece at a time, so that an
// upload holds the pieces in flight and not a second copy of the object.
type Body interface {
	// Size is the object's length in bytes.
	Size() int64
	// ReadAt fills p with the object's bytes at off; off+len(p) <= Size.
	ReadAt(p []byte, off int64)
}

// Bytes is a Body held in one slice.
type Bytes []byte

// Size is len(b).
func (b Bytes) Size() int64 { return int64(len(b)) }

// ReadAt copies b[off:] into p.
func (b Bytes) ReadAt(p []byte, off int64) { copy(p, b[off:]) }

// Hooks let the owner account for the copies an Uploader makes of a Body's
// pieces; any may be nil.
type Hooks struct {
	// Alloc returns a buffer of length n for a piece, Free takes it back
	// once its request returned (the Store contract: a store keeps no slice
	// it is given). Without them, buffers are made and left to the GC.
	Alloc func(n int) []byte
	Free  func(buf []byte)
	// Hold is called with a piece's size before it is copied, Release
	// once its buffer is given back (the engine's memory budget).
	Hold    func(n int64)
	Release func(n int64)
}

// Config makes an Uploader.
type Config struct {
	Store staging.Store
	// Concurrency caps the requests in flight (at least 1).
	Concurrency int
	// ChunkSize is the size of one piece: a body larger than one goes up
	// as a multipart upload of pieces of this size (the last shorter).
	ChunkSize int64
	Log       *zap.Logger
	Hooks     Hooks
}

// Uploader stores objects under a cap on requests in flight. It is safe
// for concurrent use.
type Uploader struct {
	st    staging.Store
	slots chan struct{} // one per request in flight
	chunk int64
	log   *zap.Logger
	hooks Hooks
	wg    sync.WaitGroup // Start's goroutines

	// qmu guards queue: tasks (tasks.go) waiting for a slot, in order.
	// A slot given back goes to the first of them before any other
	// request; qmu is a leaf, held for no request.
	qmu   sync.Mutex
	queue []func()
	// waiting, in tests, is called by a request that finds every slot
	// taken (held of them), before it waits for one.
	waiting func(held int)
}

// New returns an Uploader.
func New(c Config) *Uploader {
	log := c.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Uploader{st: c.Store, slots: make(chan struct{}, max(c.Concurrency, 1)),
		chunk: c.ChunkSize, log: log, hooks: c.Hooks}
}

// heldKey marks the context of a task (tasks.go), whose goroutine holds
// a slot for its whole run: its requests take no other.
type heldKey struct{}

// holds tells whether ctx is a task's of u.
func (u *Uploader) holds(ctx context.Context) bool { return ctx.Value(heldKey{}) == u }

// acquire takes a slot, or fails when ctx ends first.
func (u *Uploader) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // an ended context never takes a free slot
	}
	select {
	case u.slots <- struct{}{}:
		return nil
	default:
	}
	if u.waiting != nil {
		u.waiting(len(u.slots))
	}
	select {
	case u.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives a slot back: to the first task waiting for one, if any.
func (u *Uploader) release() {
	u.qmu.Lock()
	defer u.qmu.Unlock()
	if len(u.queue) > 0 {
		start := u.queue[0]
		u.queue = u.queue[1:]
		start() // the slot goes with it
		return
	}
	<-u.slots
}

// one makes req (one request, or a few one after another: a request and
// its lost-answer check) in a slot: the task's own, in a task.
func (u *Uploader) one(ctx context.Context, req func() error) error {
	if u.holds(ctx) {
		return req()
	}
	if err := u.acquire(ctx); err != nil {
		return err
	}
	defer u.release()
	return req()
}

func count(reqs *atomic.Int64) {
	if reqs != nil {
		reqs.Add(1)
	}
}

func (u *Uploader) alloc(n int64) []byte {
	if u.hooks.Hold != nil {
		u.hooks.Hold(n)
	}
	if u.hooks.Alloc != nil {
		return u.hooks.Alloc(int(n))
	}
	return make([]byte, n)
}

func (u *Uploader) free(buf []byte) {
	n := int64(len(buf))
	if u.hooks.Free != nil {
		u.hooks.Free(buf)
	}
	if u.hooks.Release != nil {
		u.hooks.Release(n)
	}
}

// createOpts are the options every object is created with.
func createOpts(id string) staging.PutOptions {
	return staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true},
		Metadata: map[string]string{WriteIDMeta: id}}
}

// Put stores body under key: in one request when it fits one piece, else
// as a multipart upload of pieces sent in parallel (each holding a slot).
// reqs, if set, counts the requests made.
func (u *Uploader) Put(ctx context.Context, key string, body Body, reqs *atomic.Int64) error {
	size := body.Size()
	if size <= u.chunk {
		id := NewWriteID()
		return u.one(ctx, func() error {
			buf := u.alloc(size)
			body.ReadAt(buf, 0)
			count(reqs)
			_, err := u.st.Put(ctx, key, buf, createOpts(id))
			u.free(buf)
			if err != nil {
				return u.checkLanded(ctx, key, id, size, fmt.Errorf("put %s: %w", key, err), reqs)
			}
			return nil
		})
	}
	// Created before the pieces: none is copied for an upload that fails
	// to begin.
	m := u.Create(key)
	if err := u.one(ctx, func() error {
		_, err := m.upload(ctx, reqs)
		return err
	}); err != nil {
		return err
	}
	nparts := int((size + u.chunk - 1) / u.chunk)
	perr := make([]error, nparts)
	var wg sync.WaitGroup
	for i := range nparts {
		// The slot is taken before the goroutine starts: no more pieces
		// are copied at once than the cap lets go.
		if perr[i] = u.acquire(ctx); perr[i] != nil {
			break
		}
		n := m.Reserve()
		wg.Go(func() {
			defer u.release()
			off := int64(i) * u.chunk
			buf := u.alloc(min(u.chunk, size-off))
			defer u.free(buf)
			body.ReadAt(buf, off)
			_, perr[i] = m.part(ctx, n, buf, false, reqs)
		})
	}
	wg.Wait()
	if err := errors.Join(perr...); err != nil {
		m.Abort(ctx, reqs)
		return err
	}
	if err := m.Complete(ctx, reqs); err != nil {
		m.Abort(ctx, reqs)
		return err
	}
	return nil
}

// Item is one object for PutAll.
type Item struct {
	Key  string
	Body Body
}

// PutAll stores objs at once, each as Put does, and returns one error per
// object once every one is done.
func (u *Uploader) PutAll(ctx context.Context, objs []Item, reqs *atomic.Int64) []error {
	errs := make([]error, len(objs))
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Go(func() { errs[i] = u.Put(ctx, o.Key, o.Body, reqs) })
	}
	wg.Wait()
	return errs
}

// Start runs Put in a goroutine of the Uploader's; the function it returns
// waits for it and returns Put's error (call it once). Wait waits for
// every such goroutine.
func (u *Uploader) Start(ctx context.Context, key string, body Body, reqs *atomic.Int64) func() error {
	done := make(chan error, 1)
	u.wg.Go(func() { done <- u.Put(ctx, key, body, reqs) })
	return func() error { return <-done }
}

// Wait returns once every Put that Start began has returned.
func (u *Uploader) Wait() { u.wg.Wait() }

// PutGiven stores body under key in one request, whatever its size, giving
// body up: a store that keeps bodies keeps it, and kept says so (then the
// caller never reuses body, whatever the error).
func (u *Uploader) PutGiven(ctx context.Context, key string, body []byte, reqs *atomic.Int64) (kept bool, err error) {
	id := NewWriteID()
	err = u.one(ctx, func() error {
		count(reqs)
		var perr error
		_, kept, perr = staging.PutGiven(ctx, u.st, key, body, createOpts(id))
		if perr != nil {
			return u.checkLanded(ctx, key, id, int64(len(body)), fmt.Errorf("put %s: %w", key, perr), reqs)
		}
		return nil
	})
	return kept, err
}

// checkLanded decides what a failed create of key means: if the object there
// carries our write id and its size, the write landed and only its answer
// was lost; if another write id is there, or ours on an object cut short (a
// server that keeps what it received of an upload that broke off), the name
// is taken and the caller moves on to new names; otherwise the error stands.
func (u *Uploader) checkLanded(ctx context.Context, key, id string, size int64, err error, reqs *atomic.Int64) error {
	count(reqs)
	info, herr := u.st.Head(ctx, key)
	if herr != nil {
		return err
	}
	if info.Metadata[WriteIDMeta] == id {
		if info.Size == size {
			return nil
		}
		return fmt.Errorf("%w: %s holds %d of its %d bytes (an upload cut short): %w", ErrNameTaken, key, info.Size, size, err)
	}
	if errors.Is(err, staging.ErrPrecondition) {
		return fmt.Errorf("%w: %w", ErrNameTaken, err)
	}
	return err
}

// Multipart is one multipart upload, begun by Create. It keeps its parts:
// the numbers Reserve gave, and the ETag and size of each part stored. Its
// methods may be called from several goroutines (parts in parallel).
//
// The store's upload is created by the first request that needs it (a
// part's, or the completion's), in that request's slot, not by Create: the
// engine begins an upload holding its file's lock, under which no request
// is made (fs/engine/doc.go), and its first part is sent without it. A
// create that fails fails every part, and the upload with it.
type Multipart struct {
	u       *Uploader
	key     string
	writeID string
	aborted atomic.Bool

	mu       sync.Mutex // guards what follows; a leaf
	reserved int32      // parts numbered so far
	stored   map[int32]storedPart
	// created is nil until a request begins creating the upload, then
	// closed once that is decided: id is the store's upload id, or cerr why
	// there is none.
	created chan struct{}
	id      string
	cerr    error
}

// storedPart is a part the store took.
type storedPart struct {
	etag string
	size int64
}

// Create begins a multipart upload of key, to be created with
// If-None-Match when it completes. It makes no request: the first part
// creates the store's upload.
func (u *Uploader) Create(key string) *Multipart {
	return &Multipart{u: u, key: key, writeID: NewWriteID(), stored: make(map[int32]storedPart)}
}

// errAborted: a request of an upload aborted before it was created.
var errAborted = errors.New("upload aborted")

// upload returns the store's upload id, creating the upload if no request
// has begun to (in the caller's slot), else waiting for the one that has,
// or for ctx.
func (m *Multipart) upload(ctx context.Context, reqs *atomic.Int64) (string, error) {
	m.mu.Lock()
	if done := m.created; done != nil {
		m.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.id, m.cerr
	}
	done := make(chan struct{})
	m.created = done
	m.mu.Unlock()
	var id string
	err := fmt.Errorf("create upload of %s: %w", m.key, errAborted)
	if !m.aborted.Load() {
		count(reqs)
		id, err = m.u.st.CreateMultipart(ctx, m.key, createOpts(m.writeID))
		if err != nil {
			err = fmt.Errorf("create upload of %s: %w", m.key, err)
		}
	}
	m.mu.Lock()
	m.id, m.cerr = id, err
	m.mu.Unlock()
	close(done)
	return id, err
}

// Key is the upload's object key.
func (m *Multipart) Key() string { return m.key }

// Reserve numbers the upload's next part: 1, then 2, and so on. The
// object completes with every part reserved.
func (m *Multipart) Reserve() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reserved++
	return m.reserved
}

// Part stores part n (from Reserve) of the upload; data may be reused once
// it returns.
func (m *Multipart) Part(ctx context.Context, n int32, data []byte, reqs *atomic.Int64) error {
	return m.u.one(ctx, func() error {
		_, err := m.part(ctx, n, data, false, reqs)
		return err
	})
}

// PartGiven is Part of a body the caller gives up: a store that keeps
// bodies keeps it, and kept says so (then the caller never reuses data).
func (m *Multipart) PartGiven(ctx context.Context, n int32, data []byte, reqs *atomic.Int64) (kept bool, err error) {
	err = m.u.one(ctx, func() error {
		var err error
		kept, err = m.part(ctx, n, data, true, reqs)
		return err
	})
	return kept, err
}

// part makes the request of Part or PartGiven, in a slot the caller holds,
// and keeps the part's ETag.
func (m *Multipart) part(ctx context.Context, n int32, data []byte, given bool, reqs *atomic.Int64) (kept bool, err error) {
	id, err := m.upload(ctx, reqs)
	if err != nil {
		return false, err
	}
	count(reqs)
	var etag string
	if given {
		etag, kept, err = staging.UploadPartGiven(ctx, m.u.st, m.key, id, n, data)
	} else {
		etag, err = m.u.st.UploadPart(ctx, m.key, id, n, data)
	}
	if err != nil {
		return kept, fmt.Errorf("upload part %d of %s: %w", n, m.key, err)
	}
	m.mu.Lock()
	m.stored[n] = storedPart{etag: etag, size: int64(len(data))}
	m.mu.Unlock()
	return kept, nil
}

// errPartMissing: Complete was called before every part reserved was
// stored.
var errPartMissing = errors.New("part not stored")

// Complete publishes the upload, its parts in order, as one object created
// with If-None-Match; a lost answer is told from a name taken (the package
// doc). It refuses, without a request, an upload with a part reserved and
// not stored: an object must never complete without bytes it was given.
// A failed Complete leaves the upload open: the caller aborts it.
func (m *Multipart) Complete(ctx context.Context, reqs *atomic.Int64) error {
	m.mu.Lock()
	parts := make([]staging.CompletedPart, 0, m.reserved)
	var size int64
	for n := int32(1); n <= m.reserved; n++ {
		p, ok := m.stored[n]
		if !ok {
			m.mu.Unlock()
			return fmt.Errorf("complete upload of %s: part %d of %d: %w", m.key, n, m.reserved, errPartMissing)
		}
		parts = append(parts, staging.CompletedPart{Number: n, ETag: p.etag})
		size += p.size
	}
	m.mu.Unlock()
	return m.u.one(ctx, func() error {
		id, err := m.upload(ctx, reqs)
		if err != nil {
			return err
		}
		count(reqs)
		_, err = m.u.st.CompleteMultipart(ctx, m.key, id, parts, staging.Conditions{IfNoneMatch: true})
		if err != nil {
			return m.u.checkLanded(ctx, m.key, m.writeID, size, fmt.Errorf("complete upload of %s: %w", m.key, err), reqs)
		}
		return nil
	})
}

// Abort discards the upload, once: a second call does nothing. It runs
// even when ctx has ended (of ctx it keeps only its values), so that an
// upload whose context was cancelled is still aborted, for abortTimeout at
// most: it waits for a create in flight, and makes no request when none
// was made (nor does a request after it create one). An abort that fails
// leaves the upload for the cleaner: not an error of the caller's.
func (m *Multipart) Abort(ctx context.Context, reqs *atomic.Int64) {
	if m.aborted.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	err := m.u.one(ctx, func() error {
		id, err := m.upload(ctx, reqs)
		if err != nil || id == "" {
			return nil // never created (or not known to be: the cleaner's)
		}
		count(reqs)
		return m.u.st.AbortMultipart(ctx, m.key, id)
	})
	if err != nil {
		m.u.log.Debug("abort failed; the cleaner will remove the upload", zap.String("key", m.key), zap.Error(err))
	}
}
