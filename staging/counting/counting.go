// Package counting wraps a staging.Store to count its requests and their
// payload bytes by operation (staging.Op): the request costs that tests
// and benchmarks assert.
package counting

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ckptfs/ckptfs/staging"
)

// OpCounts are the requests of one operation (or of all).
type OpCounts struct {
	Requests int64
	// Errors are the requests that failed: not those answered with
	// ErrNotFound or ErrPrecondition, which the protocol expects (a head
	// that does not exist yet, the loser of a conditional write), counted
	// in Refused.
	Errors  int64
	Refused int64
	// BytesSent is the payload sent to the store (Put and UploadPart data).
	BytesSent int64
	// BytesReceived is the payload received (the bytes Get returned).
	BytesReceived int64
}

func (c *OpCounts) add(o OpCounts) {
	c.Requests += o.Requests
	c.Errors += o.Errors
	c.Refused += o.Refused
	c.BytesSent += o.BytesSent
	c.BytesReceived += o.BytesReceived
}

// Counts is a snapshot of a Store's counts.
type Counts struct {
	ops [staging.NumOps]OpCounts
	// GetSuffix counts the Gets of a suffix range (Range.Suffix > 0): reading
	// a header is exactly one of them.
	GetSuffix int64
	// GetRange counts the Gets of a range from an offset (Range.Off > 0 or
	// Range.Len > 0). Gets of whole objects are the rest of Op(OpGet).
	GetRange int64
}

// Op returns the counts of one operation; Op(OpAny) is Total().
func (c Counts) Op(op staging.Op) OpCounts {
	if op == staging.OpAny {
		return c.Total()
	}
	if op >= staging.NumOps {
		return OpCounts{}
	}
	return c.ops[op]
}

// Total sums every operation.
func (c Counts) Total() OpCounts {
	var t OpCounts
	for _, o := range c.ops[1:] {
		t.add(o)
	}
	return t
}

// Sub returns the counts of what happened between before and c.
func (c Counts) Sub(before Counts) Counts {
	out := c
	for i := range out.ops {
		out.ops[i].Requests -= before.ops[i].Requests
		out.ops[i].Errors -= before.ops[i].Errors
		out.ops[i].BytesSent -= before.ops[i].BytesSent
		out.ops[i].BytesReceived -= before.ops[i].BytesReceived
	}
	out.GetSuffix -= before.GetSuffix
	out.GetRange -= before.GetRange
	return out
}

func (c Counts) String() string {
	t := c.Total()
	s := fmt.Sprintf("%d requests (%d errors), %d bytes sent, %d received:", t.Requests, t.Errors, t.BytesSent, t.BytesReceived)
	for op := staging.OpPut; op < staging.NumOps; op++ {
		if o := c.ops[op]; o.Requests > 0 {
			s += fmt.Sprintf(" %s=%d", op, o.Requests)
		}
	}
	return s
}

// Store is a staging.Store that counts the requests it passes to another, and
// their payload bytes, by operation. Requests are counted when they return; a
// failed Put counts its bytes as sent (they were, before the failure).
type Store struct {
	inner staging.Store

	mu sync.Mutex
	c  Counts // GUARDED_BY(mu)
}

var _ staging.Store = (*Store)(nil)

// New wraps inner.
func New(inner staging.Store) *Store { return &Store{inner: inner} }

// Snapshot returns the counts so far.
func (c *Store) Snapshot() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Reset sets every count to zero.
func (c *Store) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = Counts{}
}

func (c *Store) count(op staging.Op, sent, received int, err error) {
	c.countGet(op, staging.Range{}, sent, received, err)
}

// countGet counts a request; r is the range of a Get.
func (c *Store) countGet(op staging.Op, r staging.Range, sent, received int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if op == staging.OpGet {
		switch {
		case r.Suffix > 0:
			c.c.GetSuffix++
		case r.Off > 0 || r.Len > 0:
			c.c.GetRange++
		}
	}
	o := &c.c.ops[op]
	o.Requests++
	switch {
	case err == nil:
	case errors.Is(err, staging.ErrNotFound) || errors.Is(err, staging.ErrPrecondition):
		o.Refused++
	default:
		o.Errors++
	}
	o.BytesSent += int64(sent)
	o.BytesReceived += int64(received)
}

func (c *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	info, err := c.inner.Put(ctx, key, data, opts)
	c.count(staging.OpPut, len(data), 0, err)
	return info, err
}

func (c *Store) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	info, kept, err := staging.PutGiven(ctx, c.inner, key, data, opts)
	c.count(staging.OpPut, len(data), 0, err)
	return info, kept, err
}

func (c *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	data, info, err := c.inner.Get(ctx, key, r)
	c.countGet(staging.OpGet, r, 0, len(data), err)
	return data, info, err
}

func (c *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	info, err := c.inner.Head(ctx, key)
	c.count(staging.OpHead, 0, 0, err)
	return info, err
}

func (c *Store) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	page, err := c.inner.List(ctx, prefix, startAfter, max)
	c.count(staging.OpList, 0, 0, err)
	return page, err
}

func (c *Store) Delete(ctx context.Context, key string) error {
	err := c.inner.Delete(ctx, key)
	c.count(staging.OpDelete, 0, 0, err)
	return err
}

func (c *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	id, err := c.inner.CreateMultipart(ctx, key, opts)
	c.count(staging.OpCreateMultipart, 0, 0, err)
	return id, err
}

func (c *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	etag, err := c.inner.UploadPart(ctx, key, uploadID, n, data)
	c.count(staging.OpUploadPart, len(data), 0, err)
	return etag, err
}

var _ staging.PartKeeper = (*Store)(nil)

func (c *Store) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (string, bool, error) {
	etag, kept, err := staging.UploadPartGiven(ctx, c.inner, key, uploadID, n, data)
	c.count(staging.OpUploadPart, len(data), 0, err)
	return etag, kept, err
}

func (c *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	info, err := c.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
	c.count(staging.OpCompleteMultipart, 0, 0, err)
	return info, err
}

func (c *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	err := c.inner.AbortMultipart(ctx, key, uploadID)
	c.count(staging.OpAbortMultipart, 0, 0, err)
	return err
}

func (c *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	ups, err := c.inner.ListMultipartUploads(ctx, prefix)
	c.count(staging.OpListUploads, 0, 0, err)
	return ups, err
}
