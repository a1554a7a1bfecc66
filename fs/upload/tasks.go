package upload

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Tasks runs one owner's upload tasks (sending ahead's pieces, tails,
// completions and aborts) in goroutines of the Uploader's, under its cap:
// a task holds one slot for its whole run, and the requests it makes
// through the Uploader (PutGiven, a Multipart's Part, PartGiven, Complete,
// Abort: one request each, and a lost answer's check) take no other (a
// task never calls Put or PutAll, whose pieces take slots of their own:
// tasks holding every slot would wait for one). Tasks beyond the cap wait, in order and without a goroutine, and a slot
// given back goes to the first of them before any other request. A task's
// result (its R, and a panic it raised) waits for its owner to take it with
// Next: the owner applies it under its own lock, which Tasks never takes.
// The tasks of an object (object.go) also move it along.
//
// Its methods, and its Objects', are called by the owner, one at a time
// (the engine: under File.mu); the tasks run without it and touch only
// their own R.
type Tasks[R any] struct {
	u       *Uploader
	ctx     context.Context // every task's; cancelled by Stop
	cancel  context.CancelFunc
	reqs    *atomic.Int64  // counts the requests of the tasks Tasks starts itself
	wg      sync.WaitGroup // every task Go started, queued or running
	pending int            // tasks started and not taken in by Next

	mu      sync.Mutex // guards results and landed; a leaf
	results []Result[R]
	ready   chan struct{} // a result is waiting (buffered: one signal)
	// landed, when set, is closed at the next result (Landed).
	landed chan struct{}
}

// Result is what a task left: its R, the error it returned, and the panic
// it raised (then R is as the task left it when it panicked); for a task
// of an object, the object and what the task did for it.
type Result[R any] struct {
	Value R
	Err   error
	Panic any
	Stack []byte
	Obj   *Object[R]
	Kind  Kind
}

// NewTasks returns the tasks of one owner on u; they run with a context
// derived from ctx. reqs, if set, counts the requests of the tasks it
// starts itself (an object's completion and abort).
func NewTasks[R any](u *Uploader, ctx context.Context, reqs *atomic.Int64) *Tasks[R] {
	ctx, cancel := context.WithCancel(ctx)
	return &Tasks[R]{u: u, ctx: ctx, cancel: cancel, reqs: reqs, ready: make(chan struct{}, 1)}
}

// Go runs run once a slot is free (at once if one is), with r set to v
// first: what run sets in r, and the error it returns, are the result
// Next returns.
func (t *Tasks[R]) Go(v R, run func(ctx context.Context, r *R) error) {
	t.start(Result[R]{Value: v}, run)
}

// Pending is how many tasks were started and not taken in by Next.
func (t *Tasks[R]) Pending() int { return t.pending }

// start runs a task whose result begins as res.
func (t *Tasks[R]) start(res Result[R], run func(ctx context.Context, r *R) error) {
	t.pending++
	t.wg.Add(1)
	start := func() { go t.run(res, run) }
	u := t.u
	u.qmu.Lock()
	if len(u.queue) == 0 {
		select {
		case u.slots <- struct{}{}:
			u.qmu.Unlock()
			start()
			return
		default:
		}
	}
	if u.waiting != nil {
		u.waiting(len(u.slots))
	}
	u.queue = append(u.queue, start)
	u.qmu.Unlock()
}

// run is a task's goroutine, holding a slot.
func (t *Tasks[R]) run(res Result[R], run func(ctx context.Context, r *R) error) {
	defer t.wg.Done()
	func() {
		defer func() {
			if p := recover(); p != nil {
				res.Panic, res.Stack = p, debug.Stack()
			}
		}()
		res.Err = run(context.WithValue(t.ctx, heldKey{}, t.u), &res.Value)
	}()
	// The slot first: an owner that took the result in finds it free.
	t.u.release()
	t.mu.Lock()
	t.results = append(t.results, res)
	if t.landed != nil {
		close(t.landed)
		t.landed = nil
	}
	t.mu.Unlock()
	select {
	case t.ready <- struct{}{}:
	default: // a signal is waiting already
	}
}

// Next returns the result of a task that finished: one already in, else
// (with wait) the next to finish, or ctx's error. Without wait, ok is
// false when none is in. The owner waits only while a task it started has
// not been taken in. A task of an object counts for it (taken), then the
// owner moves it along (Advance).
func (t *Tasks[R]) Next(ctx context.Context, wait bool) (res Result[R], ok bool, err error) {
	for {
		t.mu.Lock()
		if len(t.results) > 0 {
			res = t.results[0]
			t.results = t.results[1:]
			t.mu.Unlock()
			t.pending--
			if res.Obj != nil {
				res.Obj.taken(res)
			}
			return res, true, nil
		}
		t.mu.Unlock()
		if !wait {
			return res, false, nil
		}
		select {
		case <-t.ready:
		case <-ctx.Done():
			return res, false, ctx.Err()
		}
	}
}

// closedChan is a channel closed from the start.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Landed returns a channel closed once a task's result is in (at once if
// one is waiting): for an owner that waits without its own lock held and
// then takes the result in with Next under it. Unlike Next's wait it takes
// nothing, so any number may wait on it.
func (t *Tasks[R]) Landed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.results) > 0 {
		return closedChan
	}
	if t.landed == nil {
		t.landed = make(chan struct{})
	}
	return t.landed
}

// Stop cancels every task and waits for all of them: those waiting for a
// slot run too, on the cancelled context, so that each gives back what it
// holds (their requests fail at once; an abort still runs, briefly). The
// results not taken are dropped.
func (t *Tasks[R]) Stop() {
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	t.results = nil
	t.mu.Unlock()
	t.pending = 0
}
