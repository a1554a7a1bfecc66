package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/logging"
	"go.uber.org/zap"
)

// WithRegionLookup makes a store configured by c ask base instead of S3's
// global endpoint for the bucket's region.
func WithRegionLookup(c Config, base string) Config {
	h := s3Hooks{}
	if c.hooks != nil {
		h = *c.hooks
	}
	h.regionURL = base
	c.hooks = &h
	return c
}

// WithHTTPWrap makes a store configured by c send its requests through
// wrap(the client it would use).
func WithHTTPWrap(c Config, wrap func(aws.HTTPClient) aws.HTTPClient) Config {
	h := s3Hooks{}
	if c.hooks != nil {
		h = *c.hooks
	}
	h.wrapHTTP = wrap
	c.hooks = &h
	return c
}

// CRC32COf is the CRC32C of data as S3 writes it.
func CRC32COf(data []byte) string { return crc32cOf(data) }

// KnownUploads is how many uploads s remembers.
func KnownUploads(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uploads)
}

// SetMaxKnownUploads sets how many uploads s remembers at most. Set it
// before s is used.
func SetMaxKnownUploads(s *Store, n int) { s.maxUploads = n }

// SDKLogger is the SDK logger of a store whose Config.Logger is l.
func SDKLogger(l *zap.Logger) logging.Logger { return newSDKLogger(l) }

// ReadCredentialsFile is readCredentialsFile: the keys of bucket in the
// file at path.
func ReadCredentialsFile(path, profile, bucket string) (access, secret, token string, err error) {
	k, err := readCredentialsFile(context.Background(), path, profile, bucket)
	return k.access, k.secret, k.token, err
}
