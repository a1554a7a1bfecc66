// Package staging is the only door to object storage. Everything ckptfs keeps
// lives behind the Store interface. This package holds the interface, the
// errors and checks every backend shares (check.go, key.go), GetLimited, and
// RedactURL; each backend and each wrapper is a package of its own, as
// restic lays out its backends:
//
//   - staging/s3: the S3 backend, for real buckets (general purpose and
//     directory buckets, AWS and S3-compatible servers).
//   - staging/dir: a local directory, the embedded default store.
//   - staging/mem: memory, for benchmarks and unit tests.
//   - staging/link: a wrapper that emulates a network link (latency,
//     bandwidth).
//   - staging/faulty: a wrapper that injects faults by rules.
//   - staging/counting: a wrapper that counts requests by operation (Op).
//   - staging/limit: a wrapper that bounds the requests in flight at once
//     (the mount's max_requests).
//   - staging/storetest: the contract every backend passes; staging/s3test:
//     a real S3 bucket (or a local versitygw) for tests.
//
// A backend imports staging, never the other way round: the code that opens
// a store from a URL (the ckptfs command's openStore) imports the backends
// it offers.
//
// # Semantics every backend honours
//
//   - Keys are UTF-8 strings of at most 1024 bytes, '/'-separated. A key that is
//     empty, absolute, contains a NUL, or has a "." or ".." segment is refused
//     with ErrInvalidKey by every backend, so code tested on memory behaves the
//     same on a directory or a bucket.
//   - Objects are immutable once written; a Put or a completed multipart upload
//     replaces an object as a whole and atomically: a reader sees the old bytes
//     or the new ones, never a mix.
//   - Conditions: IfNoneMatch creates only when no object has the key;
//     IfMatch replaces only the object whose ETag it names. A condition that
//     does not hold returns an error for which errors.Is(err, ErrPrecondition)
//     is true (S3's 412 and the 409 of a concurrent conditional write alike).
//   - A missing key returns an error for which errors.Is(err, ErrNotFound).
//   - Delete of a missing key succeeds (S3 semantics).
//   - Multipart: parts other than the last must be at least MinPartSize bytes
//     (checked at CompleteMultipart, as S3 does); part numbers start at 1.
//     Nothing of an upload is visible until it completes; an aborted upload
//     leaves nothing behind.
//   - Put and UploadPart do not keep the caller's slice after they return: the
//     caller may reuse it (the file engine pools its piece buffers). A caller
//     that gives a body up calls UploadPartGiven or PutGiven instead: a
//     store that can keep it (PartKeeper: memory) does, and saves its copy.
//   - User metadata keys are lower-case ASCII letters, digits and '-'; S3 sends
//     them as x-amz-meta-<key>.
//
// What is read from a store is untrusted: an object read whole goes through
// GetLimited, which refuses one over its reader's limit (ErrTooLarge) before
// allocating it. A store that stops answering fails requests with ErrTimeout
// (the S3 store's s3.Timeouts) rather than hanging them.
package staging

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Backends wrap them with what was being done; callers use
// errors.Is.
var (
	// ErrNotFound: no object (or upload) has that key.
	ErrNotFound = errors.New("not found")
	// ErrPrecondition: an If-None-Match or If-Match condition did not hold.
	ErrPrecondition = errors.New("precondition failed")
	// ErrInvalidKey: the key could escape the store's root or is malformed.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidRange: a range starts at or past the end of the object.
	ErrInvalidRange = errors.New("invalid range")
	// ErrPartTooSmall: a multipart upload had a non-last part under MinPartSize.
	ErrPartTooSmall = errors.New("multipart part too small")
)

// ErrTimeout: a request to the store got no answer, or its body stopped
// moving, within the bounds of s3.Timeouts (or ctx's deadline passed). The
// request may be retried; whether a write was applied is unknown. An error
// that matches it matches context.DeadlineExceeded too, as the net
// package's timeouts do, so that every timeout is treated alike.
var ErrTimeout error = timeoutSentinel{}

type timeoutSentinel struct{}

func (timeoutSentinel) Error() string        { return "request timed out" }
func (timeoutSentinel) Is(target error) bool { return target == context.DeadlineExceeded }

// PartKeeper is a Store that can keep a part's body instead of copying it,
// when its caller gives the body up. Wrappers implement it by passing it on
// (UploadPartGiven), so that it reaches the backend through them.
type PartKeeper interface {
	// UploadPartKept is UploadPart of a body the caller never writes
	// again. kept tells whether the store holds data itself: then the
	// caller must never reuse it, whatever the error (an answer lost after
	// the part was stored still keeps it).
	UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (etag string, kept bool, err error)
	// PutKept is Put of a body the caller never writes again, as
	// UploadPartKept is of a part.
	PutKept(ctx context.Context, key string, data []byte, opts PutOptions) (info ObjectInfo, kept bool, err error)
}

// PutGiven is Put of a body the caller gives up, as UploadPartGiven is of a
// part.
func PutGiven(ctx context.Context, s Store, key string, data []byte, opts PutOptions) (ObjectInfo, bool, error) {
	if k, ok := s.(PartKeeper); ok {
		return k.PutKept(ctx, key, data, opts)
	}
	info, err := s.Put(ctx, key, data, opts)
	return info, false, err
}

// UploadPartGiven uploads a part whose body the caller gives up: a store
// that keeps bodies keeps it; any other copies it, as UploadPart does
// (kept is false).
func UploadPartGiven(ctx context.Context, s Store, key, uploadID string, n int32, data []byte) (etag string, kept bool, err error) {
	if k, ok := s.(PartKeeper); ok {
		return k.UploadPartKept(ctx, key, uploadID, n, data)
	}
	etag, err = s.UploadPart(ctx, key, uploadID, n, data)
	return etag, false, err
}

// MinPartSize is S3's minimum size of every part but the last of a multipart
// upload; every backend enforces it so that tests on memory catch violations.
const MinPartSize = 5 << 20

// Conditions of a write.
type Conditions struct {
	// IfNoneMatch: create only; fail with ErrPrecondition if the key exists.
	IfNoneMatch bool
	// IfMatch: replace only the object with this ETag; fail with
	// ErrPrecondition otherwise (and if the key does not exist).
	IfMatch string
}

// PutOptions are the options of Put and CreateMultipart.
type PutOptions struct {
	Conditions
	// Metadata is stored with the object and returned by Head and Get.
	Metadata map[string]string
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string // opaque; compare only for equality (equal bytes may keep an equal ETag on S3)
	LastModified time.Time
	// Metadata is filled by Head, Get, Put and CompleteMultipart; List leaves
	// it nil.
	Metadata map[string]string
}

// Range selects bytes of an object for Get.
//
// The zero Range is the whole object. With Suffix > 0 it is the last Suffix
// bytes (the whole object if it is shorter), like HTTP "bytes=-N". Otherwise it
// is Len bytes from Off (Len <= 0 meaning to the end); a range that runs past
// the end is cut at the end, and one that starts at or past the end fails with
// ErrInvalidRange (an empty object read whole is not an error).
type Range struct {
	Off    int64
	Len    int64
	Suffix int64
}

// Whole is the zero Range.
func Whole() Range { return Range{} }

// Bytes is the range of n bytes at off.
func Bytes(off, n int64) Range { return Range{Off: off, Len: n} }

// Suffix is the range of the last n bytes.
func Suffix(n int64) Range { return Range{Suffix: n} }

// ListPage is one page of a listing, in ascending key order.
type ListPage struct {
	Objects []ObjectInfo
	// Truncated is true when more keys follow the last one returned; list again
	// with startAfter set to the last key.
	Truncated bool
}

// Upload is an open multipart upload.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// CompletedPart names an uploaded part when completing an upload.
type CompletedPart struct {
	Number int32
	ETag   string
}

// Store is object storage. Implementations are safe for concurrent use.
// Every method honours ctx cancellation where the backend can.
type Store interface {
	// Put stores data under key as one object.
	Put(ctx context.Context, key string, data []byte, opts PutOptions) (ObjectInfo, error)
	// Get returns the bytes of r and the object's info (Size is the size of
	// the whole object, not of the range).
	Get(ctx context.Context, key string, r Range) ([]byte, ObjectInfo, error)
	// Head returns the object's info without its bytes.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// List returns up to max keys (max <= 0 or > MaxListKeys: MaxListKeys)
	// that start with prefix and sort after startAfter, in key order. What
	// every store guarantees: every object stored before List was called and
	// not deleted before it returned is in its page (up to max). Objects
	// created or deleted while it runs may be in it or not, each on its own: a
	// listing may show a key without one created just before it (S3 promises
	// no more). So a reader must not take a key missing between two listed
	// ones as proof that it is absent: it reads the key by name (the namespace
	// does so before believing a gap in its log). The directory store reads
	// each folder in one step (one getdents64 call): within a folder its
	// listing is one instant's view, so a key listed comes with every key of
	// that folder stored before it.
	List(ctx context.Context, prefix, startAfter string, max int) (ListPage, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error

	// CreateMultipart starts an upload; its metadata applies to the object.
	// The conditions of opts are ignored here: pass them to CompleteMultipart.
	CreateMultipart(ctx context.Context, key string, opts PutOptions) (uploadID string, err error)
	// UploadPart stores part number n (1..10000) and returns its ETag.
	UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (etag string, err error)
	// CompleteMultipart publishes the upload as one object if cond holds.
	// A failed condition leaves the upload open (abort it).
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []CompletedPart, cond Conditions) (ObjectInfo, error)
	// AbortMultipart discards an upload and its parts; an unknown upload is
	// ErrNotFound.
	AbortMultipart(ctx context.Context, key, uploadID string) error
	// ListMultipartUploads lists open uploads whose key starts with prefix.
	ListMultipartUploads(ctx context.Context, prefix string) ([]Upload, error)
}

// ListAll lists every object under prefix, following pages.
func ListAll(ctx context.Context, s Store, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, MaxListKeys)
		if err != nil {
			return out, err
		}
		out = append(out, page.Objects...)
		if !page.Truncated || len(page.Objects) == 0 {
			return out, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}
