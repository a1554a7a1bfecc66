package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// Counts is a snapshot of a Counting store.
type Counts struct {
	ops [numOps]OpCounts
	// GetSuffix counts the Gets of a suffix range (Range.Suffix > 0): reading
	// a header is exactly one of them.
	GetSuffix int64
	// GetRange counts the Gets of a range from an offset (Range.Off > 0 or
	// Range.Len > 0). Gets of whole objects are the rest of Op(OpGet).
	GetRange int64
}

// Op returns the counts of one operation; Op(OpAny) is Total().
func (c Counts) Op(op Op) OpCounts {
	if op == OpAny {
		return c.Total()
	}
	if op >= numOps {
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
	for op := OpPut; op < numOps; op++ {
		if o := c.ops[op]; o.Requests > 0 {
			s += fmt.Sprintf(" %s=%d", op, o.Requests)
		}
	}
	return s
}

// Counting is a Store that counts the requests it passes to another, and
// their payload bytes, by operation. Requests are counted when they return;
// a failed Put counts its bytes as sent (they were, before the failure).
type Counting struct {
	inner Store

	mu sync.Mutex
	c  Counts // GUARDED_BY(mu)
}

var _ Store = (*Counting)(nil)

// NewCounting wraps inner.
func NewCounting(inner Store) *Counting { return &Counting{inner: inner} }

// Snapshot returns the counts so far.
func (c *Counting) Snapshot() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// Reset sets every count to zero.
func (c *Counting) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = Counts{}
}

func (c *Counting) count(op Op, sent, received int, err error) {
	c.countGet(op, Range{}, sent, received, err)
}

// countGet counts a request; r is the range of a Get.
func (c *Counting) countGet(op Op, r Range, sent, received int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if op == OpGet {
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
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrPrecondition):
		o.Refused++
	default:
		o.Errors++
	}
	o.BytesSent += int64(sent)
	o.BytesReceived += int64(received)
}

func (c *Counting) Put(ctx context.Context, key string, data []byte, opts PutOptions) (ObjectInfo, error) {
	info, err := c.inner.Put(ctx, key, data, opts)
	c.count(OpPut, len(data), 0, err)
	return info, err
}

func (c *Counting) Get(ctx context.Context, key string, r Range) ([]byte, ObjectInfo, error) {
	data, info, err := c.inner.Get(ctx, key, r)
	c.countGet(OpGet, r, 0, len(data), err)
	return data, info, err
}

func (c *Counting) Head(ctx context.Context, key string) (ObjectInfo, error) {
	info, err := c.inner.Head(ctx, key)
	c.count(OpHead, 0, 0, err)
	return info, err
}

func (c *Counting) List(ctx context.Context, prefix, startAfter string, max int) (ListPage, error) {
	page, err := c.inner.List(ctx, prefix, startAfter, max)
	c.count(OpList, 0, 0, err)
	return page, err
}

func (c *Counting) Delete(ctx context.Context, key string) error {
	err := c.inner.Delete(ctx, key)
	c.count(OpDelete, 0, 0, err)
	return err
}

func (c *Counting) CreateMultipart(ctx context.Context, key string, opts PutOptions) (string, error) {
	id, err := c.inner.CreateMultipart(ctx, key, opts)
	c.count(OpCreateMultipart, 0, 0, err)
	return id, err
}

func (c *Counting) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	etag, err := c.inner.UploadPart(ctx, key, uploadID, n, data)
	c.count(OpUploadPart, len(data), 0, err)
	return etag, err
}

func (c *Counting) CompleteMultipart(ctx context.Context, key, uploadID string, parts []CompletedPart, cond Conditions) (ObjectInfo, error) {
	info, err := c.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
	c.count(OpCompleteMultipart, 0, 0, err)
	return info, err
}

func (c *Counting) AbortMultipart(ctx context.Context, key, uploadID string) error {
	err := c.inner.AbortMultipart(ctx, key, uploadID)
	c.count(OpAbortMultipart, 0, 0, err)
	return err
}

func (c *Counting) ListMultipartUploads(ctx context.Context, prefix string) ([]Upload, error) {
	ups, err := c.inner.ListMultipartUploads(ctx, prefix)
	c.count(OpListUploads, 0, 0, err)
	return ups, err
}
