package upload

import (
	"context"
	"fmt"
)

// Kind is what a task does for its object.
type Kind uint8

const (
	// Piece stores a part of the object's multipart upload.
	Piece Kind = iota
	// Whole stores the object in one request.
	Whole
	// Complete completes the multipart upload (Tasks starts it).
	Complete
	// Abort aborts the multipart upload (Tasks starts it).
	Abort
)

// Object is one object an owner sends with its Tasks: whole, in one task,
// or as a multipart upload (SetUpload) of piece tasks. It keeps what its
// tasks came to: how many are in flight, the first failure (a task's error
// or panic, or the owner's Fail), whether it is stored. Once every task of
// it is in, Advance moves it along: completes a closed multipart upload,
// aborts a failed one, and says when it is finished, stored or not, so
// that the owner applies what that means (its blocks stored where, or
// still to send) under its own lock. Its tag is the R of the tasks Tasks
// starts for it. Called by the owner, as Tasks is.
type Object[R any] struct {
	tag      R
	up       *Multipart
	pending  int   // tasks in flight
	closed   bool  // no more pieces
	failed   error // the first failure: the object is aborted, never completed
	aborting bool
	complete bool // stored
	finished bool // completed or failed, and said so by Advance
}

// Outcome is what Advance says of an object.
type Outcome uint8

const (
	// Busy: tasks of it are in flight (perhaps just started), or it is
	// open, or it was said finished already.
	Busy Outcome = iota
	// Stored: the object is stored; said once.
	Stored
	// Failed: the object failed and is aborted (if it had an upload);
	// said once.
	Failed
)

// NewObject returns an object whose tasks' results (those Tasks starts)
// begin as tag.
func (t *Tasks[R]) NewObject(tag R) *Object[R] { return &Object[R]{tag: tag} }

// SetUpload makes o a multipart upload's object.
func (o *Object[R]) SetUpload(m *Multipart) { o.up = m }

// Upload is o's multipart upload (nil for an object sent whole, or not
// created).
func (o *Object[R]) Upload() *Multipart { return o.up }

// Close says no more pieces come: once its tasks are in, o completes.
func (o *Object[R]) Close() { o.closed = true }

// Closed tells whether Close was called.
func (o *Object[R]) Closed() bool { return o.closed }

// Fail fails o (the first failure is kept): it is aborted once its tasks
// are in, and never completes.
func (o *Object[R]) Fail(err error) {
	if o.failed == nil {
		o.failed = err
	}
}

// Failed is o's first failure.
func (o *Object[R]) Failed() error { return o.failed }

// Stored tells whether o is stored.
func (o *Object[R]) Stored() bool { return o.complete }

// GoFor runs a task of o, as Go does.
func (t *Tasks[R]) GoFor(o *Object[R], k Kind, run func(ctx context.Context, r *R) error) {
	o.pending++
	t.start(Result[R]{Value: o.tag, Obj: o, Kind: k}, run)
}

// taken counts a task's result for o.
func (o *Object[R]) taken(res Result[R]) {
	o.pending--
	switch {
	case res.Panic != nil:
		o.Fail(fmt.Errorf("upload task panicked: %v", res.Panic))
	case res.Err != nil:
		if res.Kind != Abort { // an abort that fails leaves the upload to the cleaner
			o.Fail(res.Err)
		}
	case res.Kind == Whole || res.Kind == Complete:
		o.complete = true
	}
}

// Advance moves o along once its tasks are in: a stored object is Stored; a
// failed one is aborted first (a task) if it has an upload, then Failed; a
// closed multipart upload is completed (a task). Else, and while tasks of
// it are in flight, it is Busy.
func (t *Tasks[R]) Advance(o *Object[R]) Outcome {
	if o.finished || o.pending > 0 {
		return Busy
	}
	switch {
	case o.complete:
		o.finished = true
		return Stored
	case o.failed != nil:
		if up := o.up; up != nil && !o.aborting {
			o.aborting = true
			t.GoFor(o, Abort, func(ctx context.Context, _ *R) error {
				up.Abort(ctx, t.reqs)
				return nil
			})
			return Busy
		}
		o.finished = true
		return Failed
	case o.closed && o.up != nil:
		up := o.up
		t.GoFor(o, Complete, func(ctx context.Context, _ *R) error { return up.Complete(ctx, t.reqs) })
	}
	return Busy
}
