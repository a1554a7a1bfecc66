package s3

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// Config says which bucket an S3 store uses and how to reach it.
//
// Credentials come from the SDK's standard chain (environment, shared config
// and credentials files, SSO, web identity, container and instance roles)
// unless AccessKey and SecretKey, or a CredentialsFile, are given. String redacts the secrets, so a
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
	// Profile selects a profile of the shared config files (of
	// CredentialsFile, when that is in AWS's format).
	Profile string
	// CredentialsFile is a file of keys: an AWS shared credentials file
	// or an s3fs passwd file (ACCESS_KEY:SECRET_KEY lines), open to its
	// owner only. Its keys win over the environment's. See
	// readCredentialsFile.
	CredentialsFile string
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
	// Logger receives the AWS SDK's log lines: warnings at warn, the rest
	// at debug, named "aws". Nil discards them.
	Logger *zap.Logger

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
	return fmt.Sprintf("{Bucket:%s Prefix:%s Endpoint:%s Region:%s PathStyle:%t AccessKey:%s SecretKey:%s SessionToken:%s Profile:%s CredentialsFile:%s DirectoryBucket:%t SignPayload:%t MaxIdleConns:%d Timeouts:%+v SSE:%s SSEKMSKeyID:%s StorageClass:%s RequesterPays:%t CABundle:%s Checksum:%s}",
		c.Bucket, c.Prefix, staging.RedactURL(c.Endpoint), c.Region, c.PathStyle, redact(c.AccessKey), redact(c.SecretKey), redact(c.SessionToken), c.Profile, c.CredentialsFile, c.DirectoryBucket, c.SignPayload, c.MaxIdleConns, c.Timeouts,
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
	if c.CredentialsFile != "" && c.AccessKey != "" {
		errs = append(errs, errors.New("give credentials as keys or in a credentials file, not both"))
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
