package staging

import "github.com/aws/aws-sdk-go-v2/aws"

// WithRegionLookup makes a store configured by c ask base instead of S3's
// global endpoint for the bucket's region.
func WithRegionLookup(c S3Config, base string) S3Config {
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
func WithHTTPWrap(c S3Config, wrap func(aws.HTTPClient) aws.HTTPClient) S3Config {
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
func KnownUploads(s *S3) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uploads)
}

// SetMaxKnownUploads sets how many uploads s remembers at most. Set it
// before s is used.
func SetMaxKnownUploads(s *S3, n int) { s.maxUploads = n }
