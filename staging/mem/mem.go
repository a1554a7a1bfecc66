// Package mem is the memory backend of staging: objects kept in the
// process, for unit tests and benchmarks.
//
// # ETags
//
// New gives every write a fresh ETag, unique within the Store, so two
// writes never compare equal. S3 does not: its ETag is computed from the
// bytes, and a write of the same bytes gets the same ETag again, whatever
// its metadata. Code that takes an unchanged ETag for "nobody wrote here"
// (an If-Match that should fail after a rewrite, a cache keyed by ETag)
// passes every test on New and breaks on S3: a head rewritten with only its
// metadata changed kept its ETag on S3, and another writer's If-Match on
// the old ETag replaced it unseen. NewS3ETags gives a Store whose ETags are
// S3's, so tests can show such bugs without a server:
//
//	PutObject                  "<hex md5(body)>"
//	UploadPart                 "<hex md5(part)>"
//	CompleteMultipartUpload    "<hex md5(md5(part 1) || ... || md5(part N))>-N"
//
// where md5(x) in the concatenation is the 16 binary bytes, and N is the
// number of parts completed. IfMatch and IfNoneMatch compare against these.
// staging has no server-side copy, so there is none to emulate (S3's
// CopyObject of a single-part object keeps the source's ETag: the bytes are
// the same).
// Computing MD5s costs CPU, so New gives S3's ETags only when the
// environment asks (ETagsEnv, set by the project's test command):
// benchmarks and mem:// mounts keep unique ones.
package mem

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// Store is a staging.Store in memory with the semantics of S3 documented on
// staging.Store. It
// backs unit tests and benchmarks that move GiBs, so it copies only where a
// caller could otherwise change stored bytes:
//
//   - Put and UploadPart copy data: callers may reuse their buffers.
//   - Get returns a slice of the stored object without copying it. Callers
//     must not modify the bytes Get returns (objects are immutable; a later
//     Put of the key stores a new slice and leaves old readers' bytes alone).
//
// ETags are opaque quoted strings: unique per write within one Store made by
// New, computed from the bytes as S3 does in one made by NewS3ETags (see the
// package doc).
type Store struct {
	tag     string // random per Store, so ETags of two stores never compare equal
	s3ETags bool   // ETags from the bytes, as S3 computes them

	mu      sync.RWMutex
	seq     uint64                // GUARDED_BY(mu); numbers ETags and upload ids
	objects map[string]*memObject // GUARDED_BY(mu)
	keys    []string              // GUARDED_BY(mu); INVARIANT: the keys of objects, sorted
	bytes   int64                 // GUARDED_BY(mu); INVARIANT: sum of len(data) of objects
	uploads map[string]*memUpload // GUARDED_BY(mu); by upload id
}

// memObject is immutable once stored: readers share it without copying.
// An object completed from a multipart upload keeps its parts as they are
// (chunks) instead of concatenating them: on a real server that copy is the
// server's work, and on this store it would be the caller's CPU, distorting
// the benchmarks that run on memory. A Get inside one chunk shares it; one
// across chunks is assembled.
type memObject struct {
	data   []byte   // the bytes, for an object stored whole
	chunks [][]byte // the parts, for a completed multipart upload
	size   int64
	etag   string
	mod    time.Time
	md     map[string]string
}

type memUpload struct {
	key       string
	md        map[string]string
	initiated time.Time
	parts     map[int32]memPart
}

type memPart struct {
	data []byte
	etag string
	sum  [md5.Size]byte // MD5 of data, kept only for S3 ETags
}

var _ staging.Store = (*Store)(nil)

// ETagsEnv names the environment variable that makes New's stores give
// S3's ETags: CKPTFS_MEM_ETAGS=s3. The project's test command sets it, so
// that every unit test meets S3's ETags, while benchmarks and mem:// mounts
// (which run without it) skip the MD5s: 1.15 CPU-s per GiB on the 2-core
// development machine (crypto/md5 over 1 MiB buffers).
const ETagsEnv = "CKPTFS_MEM_ETAGS"

// New returns an empty memory store: its ETags are unique per write, or
// S3's when the environment says ETagsEnv=s3.
func New() *Store {
	m := NewUniqueETags()
	m.s3ETags = os.Getenv(ETagsEnv) == "s3"
	return m
}

// NewUniqueETags returns an empty memory store that gives every write a
// fresh ETag, whatever the environment says.
func NewUniqueETags() *Store {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return &Store{
		tag:     hex.EncodeToString(b[:]),
		objects: make(map[string]*memObject),
		uploads: make(map[string]*memUpload),
	}
}

// NewS3ETags returns an empty memory store whose ETags are computed from
// the bytes as S3 computes them (see the package doc): a write of the same
// bytes keeps the ETag, which New's stores never do.
func NewS3ETags() *Store {
	m := NewUniqueETags()
	m.s3ETags = true
	return m
}

// Len is the number of objects stored.
func (m *Store) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.objects)
}

// Bytes is the total size of the objects stored (open uploads' parts are not
// counted: they are not objects yet).
func (m *Store) Bytes() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.bytes
}

// nextTag returns a fresh ETag-like string. Called with mu held for writing.
func (m *Store) nextTag() string {
	m.seq++
	return fmt.Sprintf("%s-%x", m.tag, m.seq)
}

func (m *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	info, _, err := m.put(ctx, key, data, opts, false)
	return info, err
}

// PutKept keeps data itself, as UploadPartKept does.
func (m *Store) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	return m.put(ctx, key, data, opts, true)
}

func (m *Store) put(ctx context.Context, key string, data []byte, opts staging.PutOptions, keep bool) (staging.ObjectInfo, bool, error) {
	if err := staging.CheckWrite(ctx, "put", key, opts.Metadata); err != nil {
		return staging.ObjectInfo{}, false, err
	}
	obj := &memObject{data: data[:len(data):len(data)], size: int64(len(data)), md: maps.Clone(opts.Metadata), mod: time.Now()}
	if !keep {
		obj.data = slices.Clone(data)
	}
	if obj.data == nil {
		obj.data = []byte{}
	}
	if m.s3ETags {
		sum := md5.Sum(data)
		obj.etag = quoteMD5(sum[:], 0)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.publish(key, obj, opts.Conditions); err != nil {
		// Not stored: the caller's body is its own again.
		return staging.ObjectInfo{}, false, fmt.Errorf("put %s: %w", key, err)
	}
	return obj.info(key), keep, nil
}

// quoteMD5 is the ETag S3 gives an object whose MD5 (or, with parts > 0,
// MD5 of its parts' MD5s) is sum.
func quoteMD5(sum []byte, parts int) string {
	if parts > 0 {
		return fmt.Sprintf(`"%x-%d"`, sum, parts)
	}
	return `"` + hex.EncodeToString(sum) + `"`
}

// publish stores obj under key if cond holds, giving it a fresh ETag unless
// it has one (S3 ETags are computed before). Called with mu held for writing.
func (m *Store) publish(key string, obj *memObject, cond staging.Conditions) error {
	old := m.objects[key]
	if err := staging.CheckConditions(cond, old != nil, func() string { return old.etag }); err != nil {
		return err
	}
	if obj.etag == "" {
		obj.etag = `"` + m.nextTag() + `"`
	}
	m.objects[key] = obj
	m.bytes += obj.size
	if old != nil {
		m.bytes -= old.size
	} else {
		i, _ := slices.BinarySearch(m.keys, key)
		m.keys = slices.Insert(m.keys, i, key)
	}
	return nil
}

// read returns n bytes at off (inside the object). The full slice
// expression keeps an append by the caller from reaching the bytes that
// follow the range.
func (o *memObject) read(off, n int64) []byte {
	if o.chunks == nil {
		return o.data[off : off+n : off+n]
	}
	out := []byte(nil)
	for _, c := range o.chunks {
		l := int64(len(c))
		if off >= l {
			off -= l
			continue
		}
		take := min(n, l-off)
		if out == nil && take == n {
			return c[off : off+n : off+n] // inside one chunk: shared
		}
		if out == nil {
			out = make([]byte, 0, n)
		}
		out = append(out, c[off:off+take]...)
		n -= take
		off = 0
		if n == 0 {
			break
		}
	}
	if out == nil {
		out = []byte{}
	}
	return out
}

func (o *memObject) info(key string) staging.ObjectInfo {
	return staging.ObjectInfo{Key: key, Size: o.size, ETag: o.etag, LastModified: o.mod, Metadata: maps.Clone(o.md)}
}

func (m *Store) lookup(key string) *memObject {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.objects[key]
}

func (m *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := staging.CheckRead(ctx, "get", key); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	obj := m.lookup(key)
	if obj == nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("get %s: %w", key, staging.ErrNotFound)
	}
	off, n, err := r.Resolve(obj.size)
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("get %s: %w", key, err)
	}
	return obj.read(off, n), obj.info(key), nil
}

func (m *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := staging.CheckRead(ctx, "head", key); err != nil {
		return staging.ObjectInfo{}, err
	}
	obj := m.lookup(key)
	if obj == nil {
		return staging.ObjectInfo{}, fmt.Errorf("head %s: %w", key, staging.ErrNotFound)
	}
	return obj.info(key), nil
}

func (m *Store) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	max, err := staging.CheckList(ctx, "list", prefix, max)
	if err != nil {
		return staging.ListPage{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	from := prefix
	if startAfter >= prefix {
		from = startAfter + "\x00" // the first string after startAfter
	}
	i := sort.SearchStrings(m.keys, from)
	var page staging.ListPage
	for ; i < len(m.keys); i++ {
		k := m.keys[i]
		if len(k) < len(prefix) || k[:len(prefix)] != prefix {
			break
		}
		if len(page.Objects) == max {
			page.Truncated = true
			break
		}
		o := m.objects[k]
		page.Objects = append(page.Objects, staging.ObjectInfo{Key: k, Size: o.size, ETag: o.etag, LastModified: o.mod})
	}
	return page, nil
}

func (m *Store) Delete(ctx context.Context, key string) error {
	if err := staging.CheckWrite(ctx, "delete", key, nil); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.objects[key]
	if old == nil {
		return nil
	}
	delete(m.objects, key)
	m.bytes -= old.size
	if i, ok := slices.BinarySearch(m.keys, key); ok {
		m.keys = slices.Delete(m.keys, i, i+1)
	}
	return nil
}

func (m *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	if err := staging.CheckWrite(ctx, "create multipart upload", key, opts.Metadata); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextTag()
	m.uploads[id] = &memUpload{key: key, md: maps.Clone(opts.Metadata), initiated: time.Now(), parts: make(map[int32]memPart)}
	return id, nil
}

// upload returns the open upload id of key. Called with mu held.
func (m *Store) upload(key, uploadID string) (*memUpload, error) {
	u := m.uploads[uploadID]
	if u == nil || u.key != key {
		return nil, fmt.Errorf("upload %s of %s: %w", uploadID, key, staging.ErrNotFound)
	}
	return u, nil
}

func (m *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	etag, _, err := m.uploadPart(ctx, key, uploadID, n, data, false)
	return etag, err
}

var _ staging.PartKeeper = (*Store)(nil)

// UploadPartKept keeps data itself: a body given up is the memory the part
// is stored in, without the copy UploadPart makes.
func (m *Store) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (string, bool, error) {
	return m.uploadPart(ctx, key, uploadID, n, data, true)
}

func (m *Store) uploadPart(ctx context.Context, key, uploadID string, n int32, data []byte, keep bool) (string, bool, error) {
	if err := staging.CheckWrite(ctx, "upload part", key, nil); err != nil {
		return "", false, err
	}
	if err := staging.CheckPartNumber(n); err != nil {
		return "", false, fmt.Errorf("upload part of %s: %w", key, err)
	}
	p := memPart{data: data[:len(data):len(data)]}
	if !keep {
		p.data = slices.Clone(data)
	}
	if m.s3ETags {
		p.sum = md5.Sum(data)
		p.etag = quoteMD5(p.sum[:], 0)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.upload(key, uploadID)
	if err != nil {
		return "", false, fmt.Errorf("upload part %d: %w", n, err)
	}
	if p.etag == "" {
		p.etag = `"` + m.nextTag() + `"`
	}
	u.parts[n] = p
	return p.etag, keep, nil
}

func (m *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if err := staging.CheckWrite(ctx, "complete multipart upload", key, nil); err != nil {
		return staging.ObjectInfo{}, err
	}
	if err := staging.CheckCompletedParts(parts); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	// Check under the read lock and concatenate outside any lock: parts are
	// immutable, and a part replaced meanwhile is caught when publishing.
	m.mu.RLock()
	u, err := m.upload(key, uploadID)
	var chosen []memPart
	if err == nil {
		chosen, err = pickParts(u, parts)
	}
	m.mu.RUnlock()
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload: %w", err)
	}
	var size int64
	chunks := make([][]byte, len(chosen))
	for i, p := range chosen {
		size += int64(len(p.data))
		chunks[i] = p.data
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	u, err = m.upload(key, uploadID)
	if err == nil {
		_, err = pickParts(u, parts) // unchanged since: the ETags still match
	}
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload: %w", err)
	}
	obj := &memObject{chunks: chunks, size: size, md: u.md, mod: time.Now()}
	if m.s3ETags {
		h := md5.New()
		for _, p := range chosen {
			h.Write(p.sum[:])
		}
		obj.etag = quoteMD5(h.Sum(nil), len(chosen))
	}
	if err := m.publish(key, obj, cond); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	delete(m.uploads, uploadID)
	return obj.info(key), nil
}

// pickParts returns the stored parts named by parts, checking their ETags and
// sizes as S3 does. Called with mu held.
func pickParts(u *memUpload, parts []staging.CompletedPart) ([]memPart, error) {
	out := make([]memPart, len(parts))
	for i, cp := range parts {
		p, ok := u.parts[cp.Number]
		switch {
		case !ok:
			return nil, fmt.Errorf("part %d of %s was not uploaded", cp.Number, u.key)
		case p.etag != cp.ETag:
			return nil, fmt.Errorf("part %d of %s has ETag %s, not %s", cp.Number, u.key, p.etag, cp.ETag)
		case i < len(parts)-1 && len(p.data) < staging.MinPartSize:
			return nil, fmt.Errorf("part %d of %s is %d bytes: %w", cp.Number, u.key, len(p.data), staging.ErrPartTooSmall)
		}
		out[i] = p
	}
	return out, nil
}

func (m *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := staging.CheckWrite(ctx, "abort multipart upload", key, nil); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.upload(key, uploadID); err != nil {
		return fmt.Errorf("abort multipart upload: %w", err)
	}
	delete(m.uploads, uploadID)
	return nil
}

func (m *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	if err := staging.CheckPrefix(ctx, "list multipart uploads", prefix); err != nil {
		return nil, err
	}
	m.mu.RLock()
	var out []staging.Upload
	for id, u := range m.uploads {
		if len(u.key) >= len(prefix) && u.key[:len(prefix)] == prefix {
			out = append(out, staging.Upload{Key: u.key, UploadID: id, Initiated: u.initiated})
		}
	}
	m.mu.RUnlock()
	staging.SortUploads(out)
	return out, nil
}
