package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/ckptfs/ckptfs/staging"
)

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
	dials := new(atomic.Int64)
	transport := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = tm.Connect }).
		WithTransportOptions(func(t *http.Transport) {
			// Counted, so that tests and benchmarks see a connection
			// closed that could have been reused (Store.Dials).
			dial := t.DialContext
			t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, addr)
			}
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
		config.WithLogger(newSDKLogger(c.Logger)),
	}
	var credsFiles []string // nil: the SDK's
	if c.CredentialsFile != "" {
		k, err := readCredentialsFile(ctx, c.CredentialsFile, c.Profile, c.Bucket)
		if err != nil {
			return nil, err
		}
		// The file's keys win over the environment's, as s3fs's
		// passwd_file does: the option is what the mount was told.
		c.AccessKey, c.SecretKey, c.SessionToken = k.access, k.secret, k.token
		if k.ini {
			// profile= then names a section of this file, which the
			// SDK looks for too.
			credsFiles = []string{c.CredentialsFile}
			opts = append(opts, config.WithSharedCredentialsFiles(credsFiles))
		}
	}
	if c.staticCredentials() {
		// No credentials to fetch from the instance metadata service, and
		// no probe of it either (defaults mode auto asks it for the
		// region), which off EC2 waits for a time-out or, behind a proxy
		// that answers, warns of a fall-back to IMDSv1.
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
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
	var noProfile config.SharedConfigProfileNotExistError
	if errors.As(err, &noProfile) {
		return nil, &configError{fmt.Sprintf("no profile %q in %s: check profile= (or AWS_PROFILE), or add the profile (aws configure --profile %s)",
			noProfile.Profile, strings.Join(sharedFiles(credsFiles), " or "), noProfile.Profile), err}
	}
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
		dials:     dials,

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

// configError is a failure to load the AWS configuration as the user reads
// it: what is wrong and what to do, the SDK's error still reachable.
type configError struct {
	msg string
	err error
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.err }

// sharedFiles are the shared AWS files the SDK reads profiles from: the
// config file and credsFiles, or the credentials file when credsFiles is
// nil, each as the environment names it or at its default place.
func sharedFiles(credsFiles []string) []string {
	file := func(env, def string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		return def
	}
	out := []string{file("AWS_CONFIG_FILE", config.DefaultSharedConfigFilename())}
	if credsFiles == nil {
		credsFiles = []string{file("AWS_SHARED_CREDENTIALS_FILE", config.DefaultSharedCredentialsFilename())}
	}
	return append(out, credsFiles...)
}
