// Package s3 is the S3 backend of staging (aws-sdk-go-v2): general purpose
// and directory buckets of AWS S3 and S3-compatible servers. Config says
// which bucket and how; Timeouts bound every request; Explain and Diagnose
// turn a failed request into one line a user can act on.
package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckptfs/ckptfs/staging"
)

// Store is a staging.Store in one bucket (general purpose or directory) of
// AWS S3 or an S3-compatible server, under an optional key prefix.
//
// # Checksums and signing
//
// Every upload carries a checksum of its body (Config.Checksum, CRC32C
// unless set otherwise) that the server checks before it stores anything:
// a body changed between this process and the disks of the server (a proxy,
// a NIC, memory) is refused, where the CRCs of ckptfs's own objects would
// only find it at the next read. CRC32C costs one pass over the body with
// the processor's CRC instruction, little next to sending it. Over https
// the SDK sends it as a trailer of the body as it streams; over http it
// reads the body once before sending. The body is not hashed with SHA-256
// besides (unsignedBeforeChecksum). Multipart parts carry CRC32C (CRC32
// with crc32; CRC32C when crc64nvme is asked for single PUTs), which the
// store keeps per upload id until CompleteMultipart names them again; an
// upload started elsewhere has them read back with ListParts.
//
// No checksum is validated on responses
// (ResponseChecksumValidationWhenRequired), and the payload is not hashed
// into the signature (UNSIGNED-PAYLOAD) unless SignPayload is set: each is
// another full pass, and integrity does not need them: every object ckptfs
// writes carries its own CRC that readers verify, and TLS protects bytes in
// transit to a remote endpoint.
//
// # Encryption, storage class, requester pays
//
// SSE, SSEKMSKeyID and StorageClass go on every PutObject and
// CreateMultipartUpload; RequesterPays on every request that takes it.
//
// # Timeouts and retries
//
// Every request is bounded (Timeouts): a connect, the wait for an
// answer's headers, and each body, sent or received, that stops moving. A
// request that fails by one of them is an error for which errors.Is(err,
// ErrTimeout) holds, naming the operation and key. The SDK's standard
// retryer retries what it deems transient (timeouts, 5xx, throttling), with
// jittered exponential backoff, up to MaxAttempts attempts, and decides no
// retry once Timeouts.RetryMax has passed; the last attempt's error is
// returned. docs/outages.md lists what a program sees. A conditional
// write (If-None-Match, If-Match) whose first attempt succeeded but whose
// answer was lost is retried and then fails with ErrPrecondition although the
// write happened; a CompleteMultipart retried the same way fails with
// ErrNotFound (the upload is gone because it completed). Callers that must
// know tell these apart themselves, for example by reading the object back
// and comparing it with what they wrote.
//
// # Directory buckets
//
// Directory buckets list keys in no particular order, refuse StartAfter and
// accept only prefixes ending in '/'. List therefore reads every key under
// the folder of the prefix, sorts and filters them, which costs a full
// listing of that folder per page: keep listings of directory buckets rare
// or narrow. The SDK does the CreateSession authentication of directory
// buckets itself.
type Store struct {
	c         *s3.Client
	bucket    string
	prefix    string
	directory bool
	endpoint  string                  // as configured, for messages (ShownEndpoint)
	region    string                  // the region requests are signed for
	connect   time.Duration           // bound on a connect (Diagnose)
	putOpts   []func(*s3.Options)     // options of requests with a body
	putSum    types.ChecksumAlgorithm // of single PUTs; "" for none
	partSum   types.ChecksumAlgorithm // of multipart uploads; "", CRC32C or CRC32
	sse       types.ServerSideEncryption
	kmsKey    *string
	class     types.StorageClass
	payer     types.RequestPayer // "" or requester
	dials     *atomic.Int64      // connections dialled (Dials)

	mu sync.Mutex
	// uploads remembers, by upload id, what CompleteMultipart must return
	// about uploads started through this S3, so that it needs no Head.
	// Entries go when the upload completes or is aborted.
	uploads map[string]*s3Upload // GUARDED_BY(mu)
	// maxUploads bounds len(uploads): maxKnownUploads (tests lower it).
	maxUploads int
}

var _ staging.Store = (*Store)(nil)

// Dials is how many connections the store has dialled since New: with
// every reusable connection kept, at most the most requests it ever had
// in flight at once, plus retries and connections the server closed.
func (s *Store) Dials() int64 { return s.dials.Load() }

// Region is the region requests are signed for: the configured one, or the
// bucket's as the lookup found it.
func (s *Store) Region() string { return s.region }

// Bucket is the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Prefix is the prefix of every key in the bucket.
func (s *Store) Prefix() string { return s.prefix }

// full is the bucket key of key.
func (s *Store) full(key string) (*string, error) {
	k := s.prefix + key
	if len(k) > staging.MaxKeyLen {
		return nil, fmt.Errorf("key %q with prefix %q is %d bytes, more than %d: %w",
			staging.TruncKey(key), s.prefix, len(k), staging.MaxKeyLen, staging.ErrInvalidKey)
	}
	return aws.String(k), nil
}

// strip is the store key of a bucket key the server listed.
func (s *Store) strip(k string) (string, error) {
	if !strings.HasPrefix(k, s.prefix) {
		return "", fmt.Errorf("server listed key %q outside prefix %q", staging.TruncKey(k), s.prefix)
	}
	return k[len(s.prefix):], nil
}

// answeredAt is the server's Date of an answer, or the local time if it
// sent none; S3 does not return Last-Modified from writes.
func answeredAt(t time.Time, ok bool) time.Time {
	if ok && !t.IsZero() {
		return t
	}
	return time.Now().Truncate(time.Second)
}

// meta returns md, or nil when it is empty, as every backend does for an
// object without metadata.
func meta(md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	return md
}

func (s *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := staging.CheckWrite(ctx, "s3 put", key, opts.Metadata); err != nil {
		return staging.ObjectInfo{}, err
	}
	k, err := s.full(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("s3 put: %w", err)
	}
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           k,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		Metadata:      opts.Metadata,

		ChecksumAlgorithm:    s.putSum,
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.kmsKey,
		StorageClass:         s.class,
		RequestPayer:         s.payer,
	}
	setConditions(&in.IfNoneMatch, &in.IfMatch, opts.Conditions)
	out, err := s.c.PutObject(ctx, in, s.putOpts...)
	if err != nil {
		return staging.ObjectInfo{}, fail("put", key, err, opts.IfMatch != "")
	}
	return staging.ObjectInfo{
		Key:          key,
		Size:         int64(len(data)),
		ETag:         aws.ToString(out.ETag),
		LastModified: answeredAt(awsmiddleware.GetServerTime(out.ResultMetadata)),
		Metadata:     meta(maps.Clone(opts.Metadata)),
	}, nil
}

func setConditions(ifNoneMatch, ifMatch **string, c staging.Conditions) {
	if c.IfNoneMatch {
		*ifNoneMatch = aws.String("*")
	}
	if c.IfMatch != "" {
		*ifMatch = aws.String(c.IfMatch)
	}
}

// rangeHeader is the HTTP Range of r; nil for the whole object.
func rangeHeader(r staging.Range) (*string, error) {
	switch {
	case r.Off < 0 || r.Len < 0 || r.Suffix < 0:
		return nil, fmt.Errorf("range %+v has a negative field: %w", r, staging.ErrInvalidRange)
	case r.Suffix > 0:
		return aws.String("bytes=-" + strconv.FormatInt(r.Suffix, 10)), nil
	case r.Off == 0 && r.Len == 0:
		return nil, nil
	case r.Len == 0 || r.Len-1 > (1<<63-1)-r.Off:
		return aws.String("bytes=" + strconv.FormatInt(r.Off, 10) + "-"), nil
	}
	return aws.String(fmt.Sprintf("bytes=%d-%d", r.Off, r.Off+r.Len-1)), nil
}

// parseContentRange parses a Content-Range answer to a satisfied range,
// "bytes first-last/size" (RFC 9110, 14.4), as sent by the server.
func parseContentRange(s string) (first, last, size int64, err error) {
	bad := func() (int64, int64, int64, error) {
		return 0, 0, 0, fmt.Errorf("malformed Content-Range %q", staging.TruncKey(s))
	}
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return bad()
	}
	span, total, ok := strings.Cut(rest, "/")
	if !ok {
		return bad()
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return bad()
	}
	num := func(x string) (int64, bool) {
		if x == "" || x[0] < '0' || x[0] > '9' { // no sign, no space
			return 0, false
		}
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	first, ok1 := num(a)
	last, ok2 := num(b)
	size, ok3 := num(total)
	if !ok1 || !ok2 || !ok3 || first > last || last >= size {
		return bad()
	}
	return first, last, size, nil
}

func (s *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := staging.CheckRead(ctx, "s3 get", key); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	k, err := s.full(key)
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("s3 get: %w", err)
	}
	hdr, err := rangeHeader(r)
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("s3 get %s: %w", key, err)
	}
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: k, Range: hdr, RequestPayer: s.payer})
	if err != nil {
		return nil, staging.ObjectInfo{}, fail("get", key, err, false)
	}
	defer out.Body.Close()
	info := staging.ObjectInfo{
		Key:          key,
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
		Metadata:     meta(out.Metadata),
	}
	// Nothing is allocated for a body before its length is known to be what
	// was asked: a range never costs more memory than its length.
	switch {
	case hdr == nil:
		data, err := readBody(out.Body, out.ContentLength, -1)
		if err != nil {
			return nil, staging.ObjectInfo{}, bodyFail("get", key, err)
		}
		info.Size = int64(len(data))
		return data, info, nil
	case out.ContentRange == nil:
		// The server sent the whole object (200) for a range: some do for a
		// suffix of an empty object, or when ranges are not supported. Cut
		// the range here, by the rules every backend follows.
		data, size, err := cutWhole(out.Body, out.ContentLength, r)
		if err != nil {
			return nil, staging.ObjectInfo{}, bodyFail("get", key, err)
		}
		info.Size = size
		return data, info, nil
	}
	first, last, size, err := parseContentRange(*out.ContentRange)
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("s3 get %s: %w", key, err)
	}
	wantFirst, wantN, err := r.Resolve(size)
	if err != nil || first != wantFirst || last-first+1 != wantN ||
		out.ContentLength != nil && *out.ContentLength >= 0 && *out.ContentLength != wantN {
		return nil, staging.ObjectInfo{}, fmt.Errorf("s3 get %s: asked %s, server sent %d bytes as %q", key, *hdr, aws.ToInt64(out.ContentLength), *out.ContentRange)
	}
	data, err := readBody(out.Body, &wantN, wantN)
	if err != nil {
		return nil, staging.ObjectInfo{}, bodyFail("get", key, err)
	}
	info.Size = size
	return data, info, nil
}

// readBody reads a response body of contentLength bytes (nil or negative:
// unknown) into one buffer, so that large objects are not copied while
// growing. With limit >= 0, a body longer than limit is refused before
// anything is allocated for it, or once limit is passed when its length is
// unknown.
func readBody(body io.Reader, contentLength *int64, limit int64) ([]byte, error) {
	if contentLength == nil || *contentLength < 0 {
		if limit < 0 {
			return io.ReadAll(body)
		}
		data, err := io.ReadAll(io.LimitReader(body, limit+1))
		if err == nil && int64(len(data)) > limit {
			err = fmt.Errorf("body longer than the %d bytes asked", limit)
		}
		return data, err
	}
	if limit >= 0 && *contentLength > limit {
		return nil, fmt.Errorf("body of %d bytes, more than the %d asked", *contentLength, limit)
	}
	data := make([]byte, *contentLength)
	if _, err := io.ReadFull(body, data); err != nil {
		return nil, fmt.Errorf("%d-byte body: %w", len(data), err)
	}
	return data, nil
}

// cutWhole returns range r of a whole object sent as body, and the object's
// size, holding in memory no more than the range: the bytes before it are
// skipped, those after it counted.
func cutWhole(body io.Reader, contentLength *int64, r staging.Range) ([]byte, int64, error) {
	if contentLength != nil && *contentLength >= 0 {
		size := *contentLength
		off, n, err := r.Resolve(size)
		if err != nil {
			return nil, 0, err
		}
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			return nil, 0, fmt.Errorf("skip %d bytes: %w", off, err)
		}
		data, err := readBody(body, &n, n)
		return data, size, err
	}
	if r.Suffix > 0 || r.Len == 0 {
		// The range's end is the object's, which only the whole body tells.
		data, err := io.ReadAll(body)
		if err != nil {
			return nil, 0, err
		}
		off, n, err := r.Resolve(int64(len(data)))
		if err != nil {
			return nil, 0, err
		}
		return data[off : off+n : off+n], int64(len(data)), nil
	}
	skipped, err := io.CopyN(io.Discard, body, r.Off)
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	data, err := io.ReadAll(io.LimitReader(body, r.Len))
	if err != nil {
		return nil, 0, err
	}
	rest, err := io.Copy(io.Discard, body)
	if err != nil {
		return nil, 0, err
	}
	size := skipped + int64(len(data)) + rest
	off, n, err := r.Resolve(size)
	if err != nil {
		return nil, 0, err
	}
	if off != r.Off || n != int64(len(data)) {
		return nil, 0, fmt.Errorf("range %+v of a %d-byte body", r, size)
	}
	return data, size, nil
}

func (s *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := staging.CheckRead(ctx, "s3 head", key); err != nil {
		return staging.ObjectInfo{}, err
	}
	k, err := s.full(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("s3 head: %w", err)
	}
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: k, RequestPayer: s.payer})
	if err != nil {
		return staging.ObjectInfo{}, fail("head", key, err, false)
	}
	return staging.ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
		Metadata:     meta(out.Metadata),
	}, nil
}

func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) (staging.ListPage, error) {
	limit, err := staging.CheckList(ctx, "s3 list", prefix, limit)
	if err != nil {
		return staging.ListPage{}, err
	}
	if s.directory {
		return s.listDirectory(ctx, prefix, startAfter, limit)
	}
	in := &s3.ListObjectsV2Input{
		Bucket:       &s.bucket,
		Prefix:       aws.String(s.prefix + prefix),
		MaxKeys:      aws.Int32(int32(limit)),
		EncodingType: types.EncodingTypeUrl,
		RequestPayer: s.payer,
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.prefix + startAfter)
	}
	out, err := s.c.ListObjectsV2(ctx, in)
	if err != nil {
		return staging.ListPage{}, fail("list", prefix, err, false)
	}
	page := staging.ListPage{Truncated: aws.ToBool(out.IsTruncated)}
	for _, o := range out.Contents {
		info, err := s.listed(o, out.EncodingType)
		if err != nil {
			return staging.ListPage{}, fmt.Errorf("s3 list %s: %w", prefix, err)
		}
		page.Objects = append(page.Objects, info)
	}
	return page, nil
}

// listed is the info of o as a listing encoded with enc returned it.
func (s *Store) listed(o types.Object, enc types.EncodingType) (staging.ObjectInfo, error) {
	k, err := decodeKey(aws.ToString(o.Key), enc)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	key, err := s.strip(k)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	return staging.ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(o.Size),
		ETag:         aws.ToString(o.ETag),
		LastModified: aws.ToTime(o.LastModified),
	}, nil
}

// decodeKey undoes the encoding of a key in a listing. Listings ask for URL
// encoding, without which XML cannot carry keys with control characters; a
// server that applied it says so in the answer (some servers ignore it).
func decodeKey(k string, enc types.EncodingType) (string, error) {
	if enc != types.EncodingTypeUrl {
		return k, nil
	}
	d, err := url.QueryUnescape(k)
	if err != nil {
		return "", fmt.Errorf("listed key %q: %w", staging.TruncKey(k), err)
	}
	return d, nil
}

// folder is the longest prefix of p that ends in '/' (or ""): the only kind
// of prefix directory buckets accept.
func folder(p string) string {
	return p[:strings.LastIndexByte(p, '/')+1]
}

// listDirectory is List for directory buckets, which list in no order and
// ignore StartAfter: read the whole folder, then sort and cut.
func (s *Store) listDirectory(ctx context.Context, prefix, startAfter string, limit int) (staging.ListPage, error) {
	full := s.prefix + prefix
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(folder(full)), EncodingType: types.EncodingTypeUrl, RequestPayer: s.payer}
	var all []staging.ObjectInfo
	for p := s3.NewListObjectsV2Paginator(s.c, in); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return staging.ListPage{}, fail("list", prefix, err, false)
		}
		for _, o := range out.Contents {
			info, err := s.listed(o, out.EncodingType)
			if err != nil {
				return staging.ListPage{}, fmt.Errorf("s3 list %s: %w", prefix, err)
			}
			if strings.HasPrefix(info.Key, prefix) && info.Key > startAfter {
				all = append(all, info)
			}
		}
	}
	slices.SortFunc(all, func(a, b staging.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	page := staging.ListPage{Objects: all}
	if len(all) > limit {
		page.Objects, page.Truncated = all[:limit:limit], true
	}
	return page, nil
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := staging.CheckWrite(ctx, "s3 delete", key, nil); err != nil {
		return err
	}
	k, err := s.full(key)
	if err != nil {
		return fmt.Errorf("s3 delete: %w", err)
	}
	if _, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: k, RequestPayer: s.payer}); err != nil {
		if sentinelOf(err) == staging.ErrNotFound {
			return nil // S3 answers 204; some compatible servers 404
		}
		return fail("delete", key, err, false)
	}
	return nil
}
