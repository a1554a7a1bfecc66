// Package s3 is the S3 backend of staging (aws-sdk-go-v2): general purpose
// and directory buckets of AWS S3 and S3-compatible servers. Config says
// which bucket and how; Timeouts bound every request; Explain and Diagnose
// turn a failed request into one line a user can act on.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
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
	"github.com/aws/smithy-go/middleware"

	"github.com/ckptfs/ckptfs/staging"
)

// Config says which bucket an S3 store uses and how to reach it.
//
// Credentials come from the SDK's standard chain (environment, shared config
// and credentials files, SSO, web identity, container and instance roles)
// unless AccessKey and SecretKey are given. String redacts the secrets, so a
// configuration may be printed.
type Config struct {
	// Bucket is the bucket name. A name ending in "--x-s3" is a directory
	// bucket (S3 Express One Zone).
	Bucket string
	// Prefix is prepended to every key ("" or a folder such as "vol1/").
	Prefix string
	// Endpoint is the base URL of an S3-compatible server
	// ("http://127.0.0.1:7070"); empty means AWS.
	Endpoint string
	// Region; empty means the SDK's chain (AWS_REGION, the profile), and
	// when the chain has none, us-east-1 if Endpoint is set, else (AWS) the
	// bucket's own, which New asks S3 for.
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
	Timeouts Timeouts

	// SSE is the server-side encryption asked for every object written:
	// "" (the bucket's default encryption), "AES256" (SSE-S3), "aws:kms"
	// (SSE-KMS) or "aws:kms:dsse" (dual-layer SSE-KMS).
	SSE string
	// SSEKMSKeyID is the KMS key (id, ARN or alias) of SSE aws:kms and
	// aws:kms:dsse; empty means the account's AWS managed key.
	SSEKMSKeyID string
	// StorageClass of every object written ("STANDARD",
	// "INTELLIGENT_TIERING", "STANDARD_IA", ...), passed through as given;
	// empty means the bucket's default (STANDARD).
	StorageClass string
	// RequesterPays sends "x-amz-request-payer: requester" on every request
	// that takes it, for a bucket whose owner charges the requester.
	RequesterPays bool
	// CABundle is a PEM file of certificate authorities to trust for the
	// endpoint's certificate, besides the system's and AWS_CA_BUNDLE's.
	CABundle string
	// Checksum is the checksum every upload carries for the server to
	// verify: "" or "crc32c" (the default), "crc32", "crc64nvme" or "off".
	// Multipart uploads use CRC32C for crc64nvme too (see S3).
	Checksum string

	// hooks are for tests only (export_s3_test.go).
	hooks *s3Hooks
}

// s3Hooks change how a store reaches the server, for tests.
type s3Hooks struct {
	// regionURL replaces https://s3.amazonaws.com in the region lookup.
	regionURL string
	// wrapHTTP wraps the HTTP client under the SDK.
	wrapHTTP func(aws.HTTPClient) aws.HTTPClient
}

// Values of Config.SSE.
const (
	SSES3      = "AES256"
	SSEKMS     = "aws:kms"
	SSEKMSDSSE = "aws:kms:dsse"
)

// Values of Config.Checksum.
const (
	ChecksumCRC32C    = "crc32c"
	ChecksumCRC32     = "crc32"
	ChecksumCRC64NVME = "crc64nvme"
	ChecksumOff       = "off"
)

// DefaultChecksum is the checksum of uploads when Config.Checksum is "".
const DefaultChecksum = ChecksumCRC32C

// String describes c without its secrets.
func (c Config) String() string {
	redact := func(s string) string {
		if s == "" {
			return ""
		}
		return "<redacted>"
	}
	return fmt.Sprintf("{Bucket:%s Prefix:%s Endpoint:%s Region:%s PathStyle:%t AccessKey:%s SecretKey:%s SessionToken:%s Profile:%s DirectoryBucket:%t SignPayload:%t MaxIdleConns:%d Timeouts:%+v SSE:%s SSEKMSKeyID:%s StorageClass:%s RequesterPays:%t CABundle:%s Checksum:%s}",
		c.Bucket, c.Prefix, staging.RedactURL(c.Endpoint), c.Region, c.PathStyle, redact(c.AccessKey), redact(c.SecretKey), redact(c.SessionToken), c.Profile, c.DirectoryBucket, c.SignPayload, c.MaxIdleConns, c.Timeouts,
		c.SSE, c.SSEKMSKeyID, c.StorageClass, c.RequesterPays, c.CABundle, c.Checksum)
}

// GoString keeps %#v from printing the secrets too.
func (c Config) GoString() string { return "s3.Config" + c.String() }

// IsDirectoryBucket reports whether c names a directory bucket.
func (c Config) IsDirectoryBucket() bool {
	return c.DirectoryBucket || strings.HasSuffix(c.Bucket, "--x-s3")
}

// validate reports every problem of c at once.
func (c Config) validate() error {
	var errs []error
	if c.Bucket == "" {
		errs = append(errs, errors.New("bucket is empty"))
	}
	if c.Prefix != "" {
		if !strings.HasSuffix(c.Prefix, "/") {
			errs = append(errs, fmt.Errorf("prefix %q does not end with '/'", c.Prefix))
		} else if err := staging.ValidateKey(c.Prefix + "x"); err != nil {
			errs = append(errs, fmt.Errorf("prefix %q: %w", c.Prefix, err))
		}
	}
	if c.Endpoint != "" {
		// Never print the endpoint as given: it may hold a secret.
		shown := staging.RedactURL(c.Endpoint)
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
	switch c.SSE {
	case "", SSES3, SSEKMS, SSEKMSDSSE:
	default:
		errs = append(errs, fmt.Errorf("sse %q: want AES256, aws:kms or aws:kms:dsse", c.SSE))
	}
	if c.SSEKMSKeyID != "" && c.SSE != SSEKMS && c.SSE != SSEKMSDSSE {
		errs = append(errs, errors.New("sse_kms_key_id needs sse=aws:kms or sse=aws:kms:dsse"))
	}
	if c.StorageClass != "" && !validStorageClass(c.StorageClass) {
		errs = append(errs, fmt.Errorf("storage class %q: want an S3 storage class such as STANDARD, INTELLIGENT_TIERING or STANDARD_IA", c.StorageClass))
	}
	if _, _, err := c.checksums(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("s3 config: %w", errors.Join(errs...))
	}
	return nil
}

// validStorageClass: S3's storage classes are upper-case words joined by
// '_' (STANDARD_IA, GLACIER_IR). New ones are passed through unchecked, but
// a lower-case or empty name is a typo, which S3 would refuse only at the
// first write.
func validStorageClass(c string) bool {
	if c == "" || c[0] < 'A' || c[0] > 'Z' || c[len(c)-1] == '_' {
		return false
	}
	for _, r := range c {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// checksums are the algorithms of single PUTs and of multipart uploads
// ("" for none).
func (c Config) checksums() (put, part types.ChecksumAlgorithm, err error) {
	switch c.Checksum {
	case "", ChecksumCRC32C:
		return types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc32c, nil
	case ChecksumCRC32:
		return types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32, nil
	case ChecksumCRC64NVME:
		// A multipart upload with CRC64NVME must be of checksum type
		// FULL_OBJECT, which needs the whole object's CRC at completion:
		// multipart uploads keep CRC32C, whose parts' CRCs S3 combines.
		return types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmCrc32c, nil
	case ChecksumOff:
		return "", "", nil
	}
	return "", "", fmt.Errorf("checksum %q: want crc32c, crc32, crc64nvme or off", c.Checksum)
}

// Store is a staging.Store in one bucket (general purpose or directory) of AWS S3 or an
// S3-compatible server, under an optional key prefix.
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

	mu sync.Mutex
	// uploads remembers, by upload id, what CompleteMultipart must return
	// about uploads started through this S3, so that it needs no Head.
	// Entries go when the upload completes or is aborted.
	uploads map[string]*s3Upload // GUARDED_BY(mu)
	// maxUploads bounds len(uploads): maxKnownUploads (tests lower it).
	maxUploads int
}

// s3Upload is what S3 knows of an upload it started.
type s3Upload struct {
	md    map[string]string
	sizes map[int32]int64  // by part number
	sums  map[int32]string // checksum of each part (base64), when partSum is set
}

// maxKnownUploads bounds how many uploads an S3 remembers; one it forgot
// (or never knew) costs CompleteMultipart a ListParts and a Head. Each
// entry holds at most MaxParts sizes and checksums.
const maxKnownUploads = 4096

var _ staging.Store = (*Store)(nil)

// New returns a store in the bucket c names. It loads credentials but
// does not contact the bucket (the first request does), except on AWS with
// no region configured: then it asks S3's global endpoint for the bucket's
// region, within ctx and the request timeout.
func New(ctx context.Context, c Config) (*Store, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	maxConns := c.MaxIdleConns
	if maxConns == 0 {
		maxConns = 64
	}
	tm := c.Timeouts.withDefaults()
	roots, err := loadCABundle(c.CABundle)
	if err != nil {
		return nil, fmt.Errorf("s3 bucket %s: %w", c.Bucket, err)
	}
	transport := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = tm.Connect }).
		WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = maxConns
			t.MaxIdleConns = max(t.MaxIdleConns, maxConns)
			t.TLSHandshakeTimeout = tm.Connect
			t.ResponseHeaderTimeout = tm.Request
			if roots != nil {
				// AWS_CA_BUNDLE, applied when the config loads, adds
				// its CAs to this pool.
				if t.TLSClientConfig == nil {
					t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
				}
				t.TLSClientConfig.RootCAs = roots
			}
		})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(transport),
		config.WithRetryer(func() aws.Retryer {
			return &boundedRetryer{
				RetryerV2: retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts, o.MaxBackoff = MaxAttempts, MaxBackoff
				}),
				max: tm.RetryMax,
			}
		}),
		// Checksums are asked for explicitly on the requests that carry
		// a body (ChecksumAlgorithm), not computed for every operation.
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
	if c.hooks != nil && c.hooks.wrapHTTP != nil {
		cfg.HTTPClient = c.hooks.wrapHTTP(cfg.HTTPClient)
	}
	// Wrapped after loading, which may add a CA bundle to the transport.
	// Not a BuildableClient any more, so the S3 client adds no timeouts of
	// its own to ours.
	cfg.HTTPClient = &stallClient{inner: cfg.HTTPClient, stall: tm.Stall}
	if cfg.Region == "" {
		switch {
		case c.Endpoint != "":
			// S3-compatible servers mostly ignore the region, but SigV4
			// needs one.
			cfg.Region = "us-east-1"
		case c.IsDirectoryBucket():
			// Their names hold a zone, not a region, and the global
			// endpoint does not know them.
			return nil, fmt.Errorf("s3 bucket %s: no region: set one in the configuration, AWS_REGION or the profile", c.Bucket)
		default:
			base := "https://s3.amazonaws.com"
			if c.hooks != nil && c.hooks.regionURL != "" {
				base = c.hooks.regionURL
			}
			rctx, cancel := context.WithTimeout(ctx, tm.Request)
			cfg.Region, err = bucketRegion(rctx, cfg.HTTPClient, base, c.Bucket)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("s3 bucket %s: no region configured (region=, AWS_REGION or the profile): %w", c.Bucket, err)
			}
		}
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.APIOptions = append(o.APIOptions, addOpStart)
	})
	putSum, partSum, _ := c.checksums() // validated
	s := &Store{
		c:         client,
		bucket:    c.Bucket,
		prefix:    c.Prefix,
		directory: c.IsDirectoryBucket(),
		endpoint:  c.Endpoint,
		region:    cfg.Region,
		connect:   tm.Connect,
		putSum:    putSum,
		partSum:   partSum,
		sse:       types.ServerSideEncryption(c.SSE),
		class:     types.StorageClass(c.StorageClass),
		uploads:   make(map[string]*s3Upload),

		maxUploads: maxKnownUploads,
	}
	if c.SSEKMSKeyID != "" {
		s.kmsKey = aws.String(c.SSEKMSKeyID)
	}
	if c.RequesterPays {
		s.payer = types.RequestPayerRequester
	}
	if !c.SignPayload {
		s.putOpts = append(s.putOpts, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware, unsignedBeforeChecksum))
	}
	return s, nil
}

// unsignedBeforeChecksum marks the payload unsigned before the SDK computes
// the request checksum, which otherwise computes the body's SHA-256 in the
// same pass and signs it (the swap to UNSIGNED-PAYLOAD comes later in the
// stack and keeps a hash already set): a second, costly, hash of every byte.
func unsignedBeforeChecksum(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("ckptfsUnsignedPayload",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			return next.HandleFinalize(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
		}), middleware.Before)
}

// loadCABundle is the system's CAs and those of the PEM file at path; nil
// when path is empty.
func loadCABundle(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ca_bundle: %w", err)
	}
	defer f.Close()
	// The system's whole bundle is a few hundred KiB.
	const most = 16 << 20
	pem, err := io.ReadAll(io.LimitReader(f, most+1))
	if err != nil {
		return nil, fmt.Errorf("ca_bundle: %w", err)
	}
	if len(pem) > most {
		return nil, fmt.Errorf("ca_bundle %s: larger than %d MiB", path, most>>20)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // none on this system: only the bundle's
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_bundle %s: no PEM certificate in the file", path)
	}
	return pool, nil
}

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
		return staging.ErrNotFound
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return staging.ErrPrecondition
	case code == "ConditionalRequestConflict":
		// A concurrent conditional write to the same key won (409).
		return staging.ErrPrecondition
	case code == "EntityTooSmall":
		return staging.ErrPartTooSmall
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return staging.ErrInvalidRange
	case code == "KeyTooLongError":
		return staging.ErrInvalidKey
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
		sentinel = staging.ErrTimeout
	}
	if ifMatch && sentinel == staging.ErrNotFound {
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchUpload" {
			sentinel = staging.ErrPrecondition
		}
	}
	if sentinel == nil {
		return fmt.Errorf("s3 %s %s: %w", op, staging.TruncKey(key), err)
	}
	return fmt.Errorf("s3 %s %s: %w: %w", op, staging.TruncKey(key), sentinel, err)
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

// bodyFail wraps an error reading a response body: the request was answered,
// the body was cut or stalled.
func bodyFail(op, key string, err error) error {
	if isTimeout(err) {
		return fmt.Errorf("s3 %s %s: read body: %w: %w", op, staging.TruncKey(key), staging.ErrTimeout, err)
	}
	return fmt.Errorf("s3 %s %s: read body: %w", op, staging.TruncKey(key), err)
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

func (s *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	if err := staging.CheckWrite(ctx, "s3 create multipart upload", key, opts.Metadata); err != nil {
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

		ChecksumAlgorithm:    s.partSum,
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.kmsKey,
		StorageClass:         s.class,
		RequestPayer:         s.payer,
	})
	if err != nil {
		return "", fail("create multipart upload", key, err, false)
	}
	id := aws.ToString(out.UploadId)
	if id == "" {
		return "", fmt.Errorf("s3 create multipart upload %s: the server returned no upload id", key)
	}
	s.mu.Lock()
	if len(s.uploads) < s.maxUploads {
		u := &s3Upload{md: meta(maps.Clone(opts.Metadata)), sizes: make(map[int32]int64)}
		if s.partSum != "" {
			u.sums = make(map[int32]string)
		}
		s.uploads[id] = u
	}
	s.mu.Unlock()
	return id, nil
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := staging.CheckWrite(ctx, "s3 upload part", key, nil); err != nil {
		return "", err
	}
	if err := staging.CheckPartNumber(n); err != nil {
		return "", fmt.Errorf("s3 upload part of %s: %w", key, err)
	}
	k, err := s.full(key)
	if err != nil {
		return "", fmt.Errorf("s3 upload part: %w", err)
	}
	in := &s3.UploadPartInput{
		Bucket:        &s.bucket,
		Key:           k,
		UploadId:      &uploadID,
		PartNumber:    aws.Int32(n),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		RequestPayer:  s.payer,
	}
	sum := ""
	if s.partSum != "" {
		// Computed here rather than by the SDK, because
		// CompleteMultipart must name it again.
		sum = partChecksum(s.partSum, data)
		in.ChecksumAlgorithm = s.partSum
		if s.partSum == types.ChecksumAlgorithmCrc32 {
			in.ChecksumCRC32 = aws.String(sum)
		} else {
			in.ChecksumCRC32C = aws.String(sum)
		}
	}
	out, err := s.c.UploadPart(ctx, in, s.putOpts...)
	if err != nil {
		return "", fail(fmt.Sprintf("upload part %d of", n), key, err, false)
	}
	s.mu.Lock()
	if u := s.uploads[uploadID]; u != nil {
		u.sizes[n] = int64(len(data))
		if u.sums != nil {
			u.sums[n] = sum
		}
	}
	s.mu.Unlock()
	return aws.ToString(out.ETag), nil
}

// known returns the size and metadata of the object that parts of an upload
// started through s make.
func (s *Store) known(uploadID string, parts []staging.CompletedPart) (size int64, md map[string]string, ok bool) {
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

// partSums are the checksums of parts by number, as CompleteMultipart must
// name them: those this S3 sent, or, for an upload it does not know, those
// the server lists. Nil when uploads carry no checksum.
func (s *Store) partSums(ctx context.Context, k *string, uploadID string, parts []staging.CompletedPart) (map[int32]string, error) {
	if s.partSum == "" {
		return nil, nil
	}
	s.mu.Lock()
	if u := s.uploads[uploadID]; u != nil && u.sums != nil {
		sums, all := make(map[int32]string, len(parts)), true
		for _, p := range parts {
			sum, ok := u.sums[p.Number]
			all = all && ok
			sums[p.Number] = sum
		}
		if all {
			s.mu.Unlock()
			return sums, nil
		}
	}
	s.mu.Unlock()
	// Started elsewhere, forgotten, or a part sent by another process.
	sums := make(map[int32]string, len(parts))
	in := &s3.ListPartsInput{Bucket: &s.bucket, Key: k, UploadId: &uploadID, RequestPayer: s.payer}
	for pg := s3.NewListPartsPaginator(s.c, in); pg.HasMorePages(); {
		out, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range out.Parts {
			sum := aws.ToString(p.ChecksumCRC32C)
			if s.partSum == types.ChecksumAlgorithmCrc32 {
				sum = aws.ToString(p.ChecksumCRC32)
			}
			// Read from the server: a CRC32 in base64 is 8 bytes.
			if sum != "" && len(sum) <= 16 && len(sums) < staging.MaxParts {
				sums[aws.ToInt32(p.PartNumber)] = sum
			}
		}
	}
	return sums, nil
}

func (s *Store) forget(uploadID string) {
	s.mu.Lock()
	delete(s.uploads, uploadID)
	s.mu.Unlock()
}

// CompleteMultipart publishes the upload. For an upload started through s,
// the size and metadata it returns are known without asking the server; for
// one started elsewhere it asks (Head of the new ETag), and if the object has
// been replaced already by then, Size is -1 and Metadata nil.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if err := staging.CheckWrite(ctx, "s3 complete multipart upload", key, nil); err != nil {
		return staging.ObjectInfo{}, err
	}
	if err := staging.CheckCompletedParts(parts); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("s3 complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	k, err := s.full(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("s3 complete multipart upload: %w", err)
	}
	// Without the parts' checksums (ListParts failed) the completion is
	// still tried: its answer says best what is wrong with the upload.
	sums, _ := s.partSums(ctx, k, uploadID, parts)
	cps := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cps[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
		switch sum := sums[p.Number]; {
		case sum == "":
		case s.partSum == types.ChecksumAlgorithmCrc32:
			cps[i].ChecksumCRC32 = aws.String(sum)
		default:
			cps[i].ChecksumCRC32C = aws.String(sum)
		}
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             k,
		UploadId:        &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cps},
		RequestPayer:    s.payer,
	}
	setConditions(&in.IfNoneMatch, &in.IfMatch, cond)
	out, err := s.c.CompleteMultipartUpload(ctx, in)
	if err != nil {
		// Whether the upload is still there is unknown (a lost answer
		// may hide a completion): a retry reads the parts back.
		s.forget(uploadID)
		return staging.ObjectInfo{}, fail("complete multipart upload "+uploadID+" of", key, err, cond.IfMatch != "")
	}
	info := staging.ObjectInfo{
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
	h, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: k, IfMatch: out.ETag, RequestPayer: s.payer})
	if err != nil {
		info.Size = -1
		return info, nil
	}
	info.Size = aws.ToInt64(h.ContentLength)
	info.LastModified = aws.ToTime(h.LastModified)
	info.Metadata = meta(h.Metadata)
	return info, nil
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := staging.CheckWrite(ctx, "s3 abort multipart upload", key, nil); err != nil {
		return err
	}
	k, err := s.full(key)
	if err != nil {
		return fmt.Errorf("s3 abort multipart upload: %w", err)
	}
	_, err = s.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: k, UploadId: &uploadID, RequestPayer: s.payer})
	// Forgotten even if the abort failed: the caller gives the upload up.
	s.forget(uploadID)
	if err != nil {
		return fail("abort multipart upload "+uploadID+" of", key, err, false)
	}
	return nil
}

func (s *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	if err := staging.CheckPrefix(ctx, "s3 list multipart uploads", prefix); err != nil {
		return nil, err
	}
	full := s.prefix + prefix
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: aws.String(full), EncodingType: types.EncodingTypeUrl, RequestPayer: s.payer}
	if s.directory {
		in.Prefix = aws.String(folder(full))
	}
	var ups []staging.Upload
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
			ups = append(ups, staging.Upload{Key: key, UploadID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		// Directory buckets page by key marker only (no upload-id-marker).
		marker, err := decodeKey(aws.ToString(out.NextKeyMarker), out.EncodingType)
		if err != nil {
			return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
		}
		next := &s3.ListMultipartUploadsInput{Bucket: in.Bucket, Prefix: in.Prefix, KeyMarker: &marker, EncodingType: in.EncodingType, RequestPayer: s.payer}
		if !s.directory {
			next.UploadIdMarker = out.NextUploadIdMarker
		}
		if aws.ToString(next.KeyMarker) == "" ||
			aws.ToString(next.KeyMarker) == aws.ToString(in.KeyMarker) && aws.ToString(next.UploadIdMarker) == aws.ToString(in.UploadIdMarker) {
			return nil, fmt.Errorf("s3 list multipart uploads %s: truncated answer without a new marker", prefix)
		}
		in = next
	}
	staging.SortUploads(ups)
	return ups, nil
}

// bucketRegion asks base (S3's global endpoint) for the region of bucket:
// S3 names it in the x-amz-bucket-region header of its answer to an
// unsigned HEAD of the bucket, whatever the status (200, 301, 403). It is
// what the SDK's feature/s3/manager GetBucketRegion does, here on the
// store's own HTTP client (its timeouts and CA bundle) and without adding
// that module, its uploader and downloader, for one request.
func bucketRegion(ctx context.Context, hc aws.HTTPClient, base, bucket string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, strings.TrimSuffix(base, "/")+"/"+url.PathEscape(bucket), nil)
	if err != nil {
		return "", fmt.Errorf("find the bucket's region: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("find the bucket's region: %w", err)
	}
	resp.Body.Close()
	region := resp.Header.Get("X-Amz-Bucket-Region")
	switch {
	case region == "" && resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("find the bucket's region: %w", ErrNoSuchBucket)
	case region == "":
		return "", fmt.Errorf("find the bucket's region: the answer (%s) names none", resp.Status)
	case !validRegion(region):
		return "", fmt.Errorf("find the bucket's region: the answer names %q, not a region", staging.TruncKey(region))
	}
	return region, nil
}

// validRegion: a region read from an answer goes into host names and
// signatures, so only its alphabet (eu-west-3, us-gov-west-1) passes.
func validRegion(r string) bool {
	if r == "" || len(r) > 64 || r[0] == '-' || r[len(r)-1] == '-' {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// partChecksum is the checksum alg (CRC32C or CRC32) of data as S3 writes
// it: base64 of the big-endian value.
func partChecksum(alg types.ChecksumAlgorithm, data []byte) string {
	tab := crc32cTable
	if alg == types.ChecksumAlgorithmCrc32 {
		tab = crc32.IEEETable
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc32.Checksum(data, tab))
	return base64.StdEncoding.EncodeToString(b[:])
}

// crc32cOf is the CRC32C of data as S3 writes it.
func crc32cOf(data []byte) string { return partChecksum(types.ChecksumAlgorithmCrc32c, data) }

var crc32cTable = crc32.MakeTable(crc32.Castagnoli)
