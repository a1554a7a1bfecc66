package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3Config says which bucket an S3 store uses and how to reach it.
//
// Credentials come from the SDK's standard chain (environment, shared config
// and credentials files, SSO, web identity, container and instance roles)
// unless AccessKey and SecretKey are given. String redacts the secrets, so a
// configuration may be printed.
type S3Config struct {
	// Bucket is the bucket name. A name ending in "--x-s3" is a directory
	// bucket (S3 Express One Zone).
	Bucket string
	// Prefix is prepended to every key ("" or a folder such as "vol1/").
	Prefix string
	// Endpoint is the base URL of an S3-compatible server
	// ("http://127.0.0.1:7070"); empty means AWS.
	Endpoint string
	// Region; empty means the SDK's chain (AWS_REGION, the profile), and
	// us-east-1 when Endpoint is set and the chain has none.
	Region string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// instead of the host name; most S3-compatible servers need it.
	PathStyle bool
	// AccessKey, SecretKey and SessionToken are static credentials; leave
	// them empty to use the standard chain.
	AccessKey    string
	SecretKey    string
	SessionToken string
	// Profile selects a profile of the shared config files.
	Profile string
	// DirectoryBucket forces directory-bucket behaviour for a bucket whose
	// name does not end in "--x-s3".
	DirectoryBucket bool
	// SignPayload includes the SHA-256 of every uploaded body in the request
	// signature. Off by default: see the comment on S3 about checksums.
	SignPayload bool
	// MaxIdleConns is how many idle connections to the endpoint are kept
	// for reuse; 0 means 64 (the SDK's 10 makes parallel transfers reconnect).
	MaxIdleConns int
	// Timeouts bound every request; zero fields take their defaults.
	Timeouts S3Timeouts
}

// String describes c without its secrets.
func (c S3Config) String() string {
	redact := func(s string) string {
		if s == "" {
			return ""
		}
		return "<redacted>"
	}
	return fmt.Sprintf("{Bucket:%s Prefix:%s Endpoint:%s Region:%s PathStyle:%t AccessKey:%s SecretKey:%s SessionToken:%s Profile:%s DirectoryBucket:%t SignPayload:%t MaxIdleConns:%d Timeouts:%+v}",
		c.Bucket, c.Prefix, RedactURL(c.Endpoint), c.Region, c.PathStyle, redact(c.AccessKey), redact(c.SecretKey), redact(c.SessionToken), c.Profile, c.DirectoryBucket, c.SignPayload, c.MaxIdleConns, c.Timeouts)
}

// GoString keeps %#v from printing the secrets too.
func (c S3Config) GoString() string { return "staging.S3Config" + c.String() }

// IsDirectoryBucket reports whether c names a directory bucket.
func (c S3Config) IsDirectoryBucket() bool {
	return c.DirectoryBucket || strings.HasSuffix(c.Bucket, "--x-s3")
}

// validate reports every problem of c at once.
func (c S3Config) validate() error {
	var errs []error
	if c.Bucket == "" {
		errs = append(errs, errors.New("bucket is empty"))
	}
	if c.Prefix != "" {
		if !strings.HasSuffix(c.Prefix, "/") {
			errs = append(errs, fmt.Errorf("prefix %q does not end with '/'", c.Prefix))
		} else if err := ValidateKey(c.Prefix + "x"); err != nil {
			errs = append(errs, fmt.Errorf("prefix %q: %w", c.Prefix, err))
		}
	}
	if c.Endpoint != "" {
		// Never print the endpoint as given: it may hold a secret.
		shown := RedactURL(c.Endpoint)
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("endpoint %q is not an http:// or https:// URL", shown))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("endpoint %q is not an http:// or https:// URL", shown))
		case u.User != nil:
			errs = append(errs, fmt.Errorf("endpoint %q has user information: give credentials as access and secret keys, or through the AWS credential chain", shown))
		}
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		errs = append(errs, errors.New("give both access key and secret key, or neither"))
	}
	if c.SessionToken != "" && c.AccessKey == "" {
		errs = append(errs, errors.New("session token without access key"))
	}
	if c.MaxIdleConns < 0 {
		errs = append(errs, fmt.Errorf("max idle connections %d is negative", c.MaxIdleConns))
	}
	errs = append(errs, c.Timeouts.validate()...)
	if len(errs) > 0 {
		return fmt.Errorf("s3 config: %w", errors.Join(errs...))
	}
	return nil
}

// S3 is a Store in one bucket (general purpose or directory) of AWS S3 or an
// S3-compatible server, under an optional key prefix.
//
// # Checksums and signing
//
// Bodies are sent as they are: no CRC is computed for the request
// (RequestChecksumCalculationWhenRequired), none is validated on responses
// (ResponseChecksumValidationWhenRequired), and the payload is not hashed
// into the signature (UNSIGNED-PAYLOAD) unless SignPayload is set. Each of
// these is a full extra pass over every byte, and at GiB/s the passes cost
// more than the transfer on loopback. Integrity does not depend on them:
// every object ckptfs writes carries its own CRC that readers verify, and
// TLS protects bytes in transit to a remote endpoint.
//
// # Timeouts and retries
//
// Every request is bounded (S3Timeouts): a connect, the wait for an
// answer's headers, and each body, sent or received, that stops moving. A
// request that fails by one of them is an error for which errors.Is(err,
// ErrTimeout) holds, naming the operation and key. The SDK's standard
// retryer retries what it deems transient (timeouts, 5xx, throttling), with
// jittered exponential backoff, up to S3MaxAttempts attempts, and decides no
// retry once S3Timeouts.RetryMax has passed; the last attempt's error is
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
type S3 struct {
	c         *s3.Client
	bucket    string
	prefix    string
	directory bool
	endpoint  string              // as configured, for messages (ShownEndpoint)
	region    string              // the region requests are signed for
	connect   time.Duration       // bound on a connect (Diagnose)
	putOpts   []func(*s3.Options) // options of requests with a body

	mu sync.Mutex
	// uploads remembers, by upload id, what CompleteMultipart must return
	// about uploads started through this S3, so that it needs no Head.
	// Entries go when the upload completes or is aborted.
	uploads map[string]*s3Upload // GUARDED_BY(mu)
}

// s3Upload is what S3 knows of an upload it started.
type s3Upload struct {
	md    map[string]string
	sizes map[int32]int64 // by part number
}

var _ Store = (*S3)(nil)

// NewS3 returns a store in the bucket c names. It loads credentials but
// does not contact the bucket: the first request does.
func NewS3(ctx context.Context, c S3Config) (*S3, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	maxConns := c.MaxIdleConns
	if maxConns == 0 {
		maxConns = 64
	}
	tm := c.Timeouts.withDefaults()
	transport := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = tm.Connect }).
		WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = maxConns
			t.MaxIdleConns = max(t.MaxIdleConns, maxConns)
			t.TLSHandshakeTimeout = tm.Connect
			t.ResponseHeaderTimeout = tm.Request
		})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(transport),
		config.WithRetryer(func() aws.Retryer {
			return &boundedRetryer{
				RetryerV2: retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts, o.MaxBackoff = S3MaxAttempts, S3MaxBackoff
				}),
				max: tm.RetryMax,
			}
		}),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(c.Profile))
	}
	if c.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, c.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 bucket %s: load AWS config: %w", c.Bucket, err)
	}
	// Wrapped after loading, which may add a CA bundle to the transport.
	// Not a BuildableClient any more, so the S3 client adds no timeouts of
	// its own to ours.
	cfg.HTTPClient = &stallClient{inner: cfg.HTTPClient, stall: tm.Stall}
	if cfg.Region == "" {
		if c.Endpoint == "" {
			return nil, fmt.Errorf("s3 bucket %s: no region: set one in the configuration, AWS_REGION or the profile", c.Bucket)
		}
		// S3-compatible servers mostly ignore the region, but SigV4 needs one.
		cfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.APIOptions = append(o.APIOptions, addOpStart)
	})
	s := &S3{
		c:         client,
		bucket:    c.Bucket,
		prefix:    c.Prefix,
		directory: c.IsDirectoryBucket(),
		endpoint:  c.Endpoint,
		region:    cfg.Region,
		connect:   tm.Connect,
		uploads:   make(map[string]*s3Upload),
	}
	if !c.SignPayload {
		s.putOpts = append(s.putOpts, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	}
	return s, nil
}

// Bucket is the bucket name.
func (s *S3) Bucket() string { return s.bucket }

// Prefix is the prefix of every key in the bucket.
func (s *S3) Prefix() string { return s.prefix }

// full is the bucket key of key.
func (s *S3) full(key string) (*string, error) {
	k := s.prefix + key
	if len(k) > MaxKeyLen {
		return nil, fmt.Errorf("key %q with prefix %q is %d bytes, more than %d: %w",
			truncKey(key), s.prefix, len(k), MaxKeyLen, ErrInvalidKey)
	}
	return aws.String(k), nil
}

// strip is the store key of a bucket key the server listed.
func (s *S3) strip(k string) (string, error) {
	if !strings.HasPrefix(k, s.prefix) {
		return "", fmt.Errorf("server listed key %q outside prefix %q", truncKey(k), s.prefix)
	}
	return k[len(s.prefix):], nil
}

// S3 error codes and what they mean to callers. Status codes cover answers
// without a body (HEAD).
func sentinelOf(err error) error {
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		// Not ErrNotFound: a missing bucket must not look like a missing
		// object, which callers may answer by creating one.
		return nil
	case code == "XAdminUserNotFound":
		// versitygw's answer (404) to an unknown access key: not a
		// missing object either.
		return nil
	case code == "NoSuchKey" || code == "NotFound" || code == "NoSuchUpload" || status == http.StatusNotFound:
		return ErrNotFound
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return ErrPrecondition
	case code == "ConditionalRequestConflict":
		// A concurrent conditional write to the same key won (409).
		return ErrPrecondition
	case code == "EntityTooSmall":
		return ErrPartTooSmall
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return ErrInvalidRange
	case code == "KeyTooLongError":
		return ErrInvalidKey
	}
	return nil
}

// fail wraps err, an error of the SDK, with the operation and key and the
// sentinel it means; both stay reachable with errors.Is and errors.As.
// ifMatch: the request was an If-Match write, where S3 answers 404 NoSuchKey
// for a missing key, which the Store contract calls a failed precondition.
func fail(op, key string, err error, ifMatch bool) error {
	sentinel := sentinelOf(err)
	if sentinel == nil && isTimeout(err) {
		sentinel = ErrTimeout
	}
	if ifMatch && sentinel == ErrNotFound {
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchUpload" {
			sentinel = ErrPrecondition
		}
	}
	if sentinel == nil {
		return fmt.Errorf("s3 %s %s: %w", op, truncKey(key), err)
	}
	return fmt.Errorf("s3 %s %s: %w: %w", op, truncKey(key), sentinel, err)
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

func (s *S3) Put(ctx context.Context, key string, data []byte, opts PutOptions) (ObjectInfo, error) {
	if err := checkWrite(ctx, "s3 put", key, opts.Metadata); err != nil {
		return ObjectInfo{}, err
	}
	k, err := s.full(key)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("s3 put: %w", err)
	}
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           k,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		Metadata:      opts.Metadata,
	}
	setConditions(&in.IfNoneMatch, &in.IfMatch, opts.Conditions)
	out, err := s.c.PutObject(ctx, in, s.putOpts...)
	if err != nil {
		return ObjectInfo{}, fail("put", key, err, opts.IfMatch != "")
	}
	return ObjectInfo{
		Key:          key,
		Size:         int64(len(data)),
		ETag:         aws.ToString(out.ETag),
		LastModified: answeredAt(awsmiddleware.GetServerTime(out.ResultMetadata)),
		Metadata:     meta(maps.Clone(opts.Metadata)),
	}, nil
}

func setConditions(ifNoneMatch, ifMatch **string, c Conditions) {
	if c.IfNoneMatch {
		*ifNoneMatch = aws.String("*")
	}
	if c.IfMatch != "" {
		*ifMatch = aws.String(c.IfMatch)
	}
}

// rangeHeader is the HTTP Range of r; nil for the whole object.
func rangeHeader(r Range) (*string, error) {
	switch {
	case r.Off < 0 || r.Len < 0 || r.Suffix < 0:
		return nil, fmt.Errorf("range %+v has a negative field: %w", r, ErrInvalidRange)
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
		return 0, 0, 0, fmt.Errorf("malformed Content-Range %q", truncKey(s))
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

func (s *S3) Get(ctx context.Context, key string, r Range) ([]byte, ObjectInfo, error) {
	if err := checkRead(ctx, "s3 get", key); err != nil {
		return nil, ObjectInfo{}, err
	}
	k, err := s.full(key)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("s3 get: %w", err)
	}
	hdr, err := rangeHeader(r)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("s3 get %s: %w", key, err)
	}
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: k, Range: hdr})
	if err != nil {
		return nil, ObjectInfo{}, fail("get", key, err, false)
	}
	defer out.Body.Close()
	info := ObjectInfo{
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
			return nil, ObjectInfo{}, bodyFail("get", key, err)
		}
		info.Size = int64(len(data))
		return data, info, nil
	case out.ContentRange == nil:
		// The server sent the whole object (200) for a range: some do for a
		// suffix of an empty object, or when ranges are not supported. Cut
		// the range here, by the rules every backend follows.
		data, size, err := cutWhole(out.Body, out.ContentLength, r)
		if err != nil {
			return nil, ObjectInfo{}, bodyFail("get", key, err)
		}
		info.Size = size
		return data, info, nil
	}
	first, last, size, err := parseContentRange(*out.ContentRange)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("s3 get %s: %w", key, err)
	}
	wantFirst, wantN, err := r.resolve(size)
	if err != nil || first != wantFirst || last-first+1 != wantN ||
		out.ContentLength != nil && *out.ContentLength >= 0 && *out.ContentLength != wantN {
		return nil, ObjectInfo{}, fmt.Errorf("s3 get %s: asked %s, server sent %d bytes as %q", key, *hdr, aws.ToInt64(out.ContentLength), *out.ContentRange)
	}
	data, err := readBody(out.Body, &wantN, wantN)
	if err != nil {
		return nil, ObjectInfo{}, bodyFail("get", key, err)
	}
	info.Size = size
	return data, info, nil
}

// bodyFail wraps an error reading a response body: the request was answered,
// the body was cut or stalled.
func bodyFail(op, key string, err error) error {
	if isTimeout(err) {
		return fmt.Errorf("s3 %s %s: read body: %w: %w", op, truncKey(key), ErrTimeout, err)
	}
	return fmt.Errorf("s3 %s %s: read body: %w", op, truncKey(key), err)
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
func cutWhole(body io.Reader, contentLength *int64, r Range) ([]byte, int64, error) {
	if contentLength != nil && *contentLength >= 0 {
		size := *contentLength
		off, n, err := r.resolve(size)
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
		off, n, err := r.resolve(int64(len(data)))
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
	off, n, err := r.resolve(size)
	if err != nil {
		return nil, 0, err
	}
	if off != r.Off || n != int64(len(data)) {
		return nil, 0, fmt.Errorf("range %+v of a %d-byte body", r, size)
	}
	return data, size, nil
}

func (s *S3) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkRead(ctx, "s3 head", key); err != nil {
		return ObjectInfo{}, err
	}
	k, err := s.full(key)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("s3 head: %w", err)
	}
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: k})
	if err != nil {
		return ObjectInfo{}, fail("head", key, err, false)
	}
	return ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
		Metadata:     meta(out.Metadata),
	}, nil
}

func (s *S3) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if err := ctx.Err(); err != nil {
		return ListPage{}, fmt.Errorf("s3 list %s: %w", prefix, err)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return ListPage{}, fmt.Errorf("s3 list: %w", err)
	}
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	if s.directory {
		return s.listDirectory(ctx, prefix, startAfter, limit)
	}
	in := &s3.ListObjectsV2Input{
		Bucket:       &s.bucket,
		Prefix:       aws.String(s.prefix + prefix),
		MaxKeys:      aws.Int32(int32(limit)),
		EncodingType: types.EncodingTypeUrl,
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.prefix + startAfter)
	}
	out, err := s.c.ListObjectsV2(ctx, in)
	if err != nil {
		return ListPage{}, fail("list", prefix, err, false)
	}
	page := ListPage{Truncated: aws.ToBool(out.IsTruncated)}
	for _, o := range out.Contents {
		info, err := s.listed(o, out.EncodingType)
		if err != nil {
			return ListPage{}, fmt.Errorf("s3 list %s: %w", prefix, err)
		}
		page.Objects = append(page.Objects, info)
	}
	return page, nil
}

// listed is the info of o as a listing encoded with enc returned it.
func (s *S3) listed(o types.Object, enc types.EncodingType) (ObjectInfo, error) {
	k, err := decodeKey(aws.ToString(o.Key), enc)
	if err != nil {
		return ObjectInfo{}, err
	}
	key, err := s.strip(k)
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{
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
		return "", fmt.Errorf("listed key %q: %w", truncKey(k), err)
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
func (s *S3) listDirectory(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	full := s.prefix + prefix
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(folder(full)), EncodingType: types.EncodingTypeUrl}
	var all []ObjectInfo
	for p := s3.NewListObjectsV2Paginator(s.c, in); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return ListPage{}, fail("list", prefix, err, false)
		}
		for _, o := range out.Contents {
			info, err := s.listed(o, out.EncodingType)
			if err != nil {
				return ListPage{}, fmt.Errorf("s3 list %s: %w", prefix, err)
			}
			if strings.HasPrefix(info.Key, prefix) && info.Key > startAfter {
				all = append(all, info)
			}
		}
	}
	slices.SortFunc(all, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	page := ListPage{Objects: all}
	if len(all) > limit {
		page.Objects, page.Truncated = all[:limit:limit], true
	}
	return page, nil
}

func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkWrite(ctx, "s3 delete", key, nil); err != nil {
		return err
	}
	k, err := s.full(key)
	if err != nil {
		return fmt.Errorf("s3 delete: %w", err)
	}
	if _, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: k}); err != nil {
		if sentinelOf(err) == ErrNotFound {
			return nil // S3 answers 204; some compatible servers 404
		}
		return fail("delete", key, err, false)
	}
	return nil
}

func (s *S3) CreateMultipart(ctx context.Context, key string, opts PutOptions) (string, error) {
	if err := checkWrite(ctx, "s3 create multipart upload", key, opts.Metadata); err != nil {
		return "", err
	}
	k, err := s.full(key)
	if err != nil {
		return "", fmt.Errorf("s3 create multipart upload: %w", err)
	}
	out, err := s.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:   &s.bucket,
		Key:      k,
		Metadata: opts.Metadata,
	})
	if err != nil {
		return "", fail("create multipart upload", key, err, false)
	}
	id := aws.ToString(out.UploadId)
	if id == "" {
		return "", fmt.Errorf("s3 create multipart upload %s: the server returned no upload id", key)
	}
	s.mu.Lock()
	s.uploads[id] = &s3Upload{md: meta(maps.Clone(opts.Metadata)), sizes: make(map[int32]int64)}
	s.mu.Unlock()
	return id, nil
}

func (s *S3) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := checkWrite(ctx, "s3 upload part", key, nil); err != nil {
		return "", err
	}
	if err := checkPartNumber(n); err != nil {
		return "", fmt.Errorf("s3 upload part of %s: %w", key, err)
	}
	k, err := s.full(key)
	if err != nil {
		return "", fmt.Errorf("s3 upload part: %w", err)
	}
	out, err := s.c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket:        &s.bucket,
		Key:           k,
		UploadId:      &uploadID,
		PartNumber:    aws.Int32(n),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	}, s.putOpts...)
	if err != nil {
		return "", fail(fmt.Sprintf("upload part %d of", n), key, err, false)
	}
	s.mu.Lock()
	if u := s.uploads[uploadID]; u != nil {
		u.sizes[n] = int64(len(data))
	}
	s.mu.Unlock()
	return aws.ToString(out.ETag), nil
}

// known returns the size and metadata of the object that parts of an upload
// started through s make.
func (s *S3) known(uploadID string, parts []CompletedPart) (size int64, md map[string]string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.uploads[uploadID]
	if u == nil {
		return 0, nil, false
	}
	for _, p := range parts {
		n, ok := u.sizes[p.Number]
		if !ok {
			return 0, nil, false
		}
		size += n
	}
	return size, maps.Clone(u.md), true
}

func (s *S3) forget(uploadID string) {
	s.mu.Lock()
	delete(s.uploads, uploadID)
	s.mu.Unlock()
}

// CompleteMultipart publishes the upload. For an upload started through s,
// the size and metadata it returns are known without asking the server; for
// one started elsewhere it asks (Head of the new ETag), and if the object has
// been replaced already by then, Size is -1 and Metadata nil.
func (s *S3) CompleteMultipart(ctx context.Context, key, uploadID string, parts []CompletedPart, cond Conditions) (ObjectInfo, error) {
	if err := checkWrite(ctx, "s3 complete multipart upload", key, nil); err != nil {
		return ObjectInfo{}, err
	}
	if err := checkCompletedParts(parts); err != nil {
		return ObjectInfo{}, fmt.Errorf("s3 complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	k, err := s.full(key)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("s3 complete multipart upload: %w", err)
	}
	cps := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cps[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             k,
		UploadId:        &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cps},
	}
	setConditions(&in.IfNoneMatch, &in.IfMatch, cond)
	out, err := s.c.CompleteMultipartUpload(ctx, in)
	if err != nil {
		return ObjectInfo{}, fail("complete multipart upload "+uploadID+" of", key, err, cond.IfMatch != "")
	}
	info := ObjectInfo{
		Key:          key,
		ETag:         aws.ToString(out.ETag),
		LastModified: answeredAt(awsmiddleware.GetServerTime(out.ResultMetadata)),
	}
	size, md, ok := s.known(uploadID, parts)
	s.forget(uploadID)
	if ok {
		info.Size, info.Metadata = size, md
		return info, nil
	}
	h, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: k, IfMatch: out.ETag})
	if err != nil {
		info.Size = -1
		return info, nil
	}
	info.Size = aws.ToInt64(h.ContentLength)
	info.LastModified = aws.ToTime(h.LastModified)
	info.Metadata = meta(h.Metadata)
	return info, nil
}

func (s *S3) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := checkWrite(ctx, "s3 abort multipart upload", key, nil); err != nil {
		return err
	}
	k, err := s.full(key)
	if err != nil {
		return fmt.Errorf("s3 abort multipart upload: %w", err)
	}
	_, err = s.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: k, UploadId: &uploadID})
	if err != nil {
		return fail("abort multipart upload "+uploadID+" of", key, err, false)
	}
	s.forget(uploadID)
	return nil
}

func (s *S3) ListMultipartUploads(ctx context.Context, prefix string) ([]Upload, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("s3 list multipart uploads: %w", err)
	}
	full := s.prefix + prefix
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: aws.String(full), EncodingType: types.EncodingTypeUrl}
	if s.directory {
		in.Prefix = aws.String(folder(full))
	}
	var ups []Upload
	for {
		out, err := s.c.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, fail("list multipart uploads", prefix, err, false)
		}
		for _, u := range out.Uploads {
			k, err := decodeKey(aws.ToString(u.Key), out.EncodingType)
			if err != nil {
				return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
			}
			if !strings.HasPrefix(k, full) {
				continue // directory buckets: outside the prefix, inside its folder
			}
			key, err := s.strip(k)
			if err != nil {
				return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
			}
			ups = append(ups, Upload{Key: key, UploadID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		// Directory buckets page by key marker only (no upload-id-marker).
		marker, err := decodeKey(aws.ToString(out.NextKeyMarker), out.EncodingType)
		if err != nil {
			return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
		}
		next := &s3.ListMultipartUploadsInput{Bucket: in.Bucket, Prefix: in.Prefix, KeyMarker: &marker, EncodingType: in.EncodingType}
		if !s.directory {
			next.UploadIdMarker = out.NextUploadIdMarker
		}
		if aws.ToString(next.KeyMarker) == "" ||
			aws.ToString(next.KeyMarker) == aws.ToString(in.KeyMarker) && aws.ToString(next.UploadIdMarker) == aws.ToString(in.UploadIdMarker) {
			return nil, fmt.Errorf("s3 list multipart uploads %s: truncated answer without a new marker", prefix)
		}
		in = next
	}
	sortUploads(ups)
	return ups, nil
}
