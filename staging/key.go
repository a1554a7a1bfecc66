package staging

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key in bytes (S3's limit).
const MaxKeyLen = 1024

// ReservedPrefix is the top folder where backends keep what is not an object
// (the directory store's temporary files, multipart parts and locks). No key
// may start with it, on any backend, so that a volume written to memory or a
// bucket can be copied into a directory store unchanged.
const ReservedPrefix = ".ckptfs-staging/"

// ValidateKey returns nil for a key every backend accepts, and otherwise an
// error wrapping ErrInvalidKey that says what is wrong. Every backend calls it
// before touching storage, so that a key refused by one is refused by all.
//
// A key is refused when it is empty, longer than MaxKeyLen, not UTF-8,
// absolute ("/x"), has an empty segment ("a//b", "a/"), a "." or ".."
// segment, a NUL byte, or starts with ReservedPrefix.
func ValidateKey(key string) error {
	if err := validateKey(key); err != nil {
		return fmt.Errorf("key %q: %s: %w", TruncKey(key), err.Error(), ErrInvalidKey)
	}
	return nil
}

func validateKey(key string) error {
	switch {
	case key == "":
		return errorString("empty")
	case len(key) > MaxKeyLen:
		return errorString(fmt.Sprintf("%d bytes, more than %d", len(key), MaxKeyLen))
	case !utf8.ValidString(key):
		return errorString("not UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return errorString("contains NUL")
	case key[0] == '/':
		return errorString("absolute")
	case strings.HasPrefix(key, ReservedPrefix):
		return errorString("in the reserved folder " + ReservedPrefix)
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return errorString("empty segment")
		case ".", "..":
			return errorString("segment " + seg)
		}
	}
	return nil
}

// ValidatePrefix checks a List or ListMultipartUploads prefix: any prefix of a
// valid key is fine (the empty prefix too); one that no valid key can start
// with is refused with ErrInvalidKey, so that a typo such as "/vol" is not
// silently an empty listing.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	// A prefix may end inside a segment or right after a '/': check it as the
	// key it would be with one more byte.
	probe := prefix
	if strings.HasSuffix(prefix, "/") {
		probe += "x"
	}
	if err := validateKey(probe); err != nil {
		// "a/." and "a/.." are prefixes of valid keys ("a/.b").
		last := probe[strings.LastIndexByte(probe, '/')+1:]
		if last != "." && last != ".." {
			return fmt.Errorf("prefix %q: %s: %w", TruncKey(prefix), err.Error(), ErrInvalidKey)
		}
		if err := validateKey(probe + "x"); err != nil {
			return fmt.Errorf("prefix %q: %s: %w", TruncKey(prefix), err.Error(), ErrInvalidKey)
		}
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TruncKey keeps error messages short when a key is huge.
func TruncKey(key string) string {
	if len(key) <= 80 {
		return key
	}
	return key[:80] + "..."
}

// MaxMetadataBytes is S3's limit on the user metadata of one object: the
// sum of the lengths of its keys and values.
const MaxMetadataBytes = 2048

// ValidateMetadata returns nil for user metadata every backend stores
// unchanged, and otherwise an error wrapping ErrInvalidKey: a metadata key is
// a key too. Keys are non-empty lower-case ASCII letters, digits and '-' (S3
// sends them as x-amz-meta-<key> headers, which are case-insensitive); values
// are printable ASCII; the total is at most MaxMetadataBytes.
func ValidateMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		total += len(k) + len(v)
		if k == "" {
			return fmt.Errorf("metadata key is empty: %w", ErrInvalidKey)
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("metadata key %q: byte %q is not a lower-case letter, digit or '-': %w", TruncKey(k), c, ErrInvalidKey)
			}
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("metadata %q: value has byte 0x%02x, not printable ASCII: %w", TruncKey(k), c, ErrInvalidKey)
			}
		}
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("metadata is %d bytes, more than %d: %w", total, MaxMetadataBytes, ErrInvalidKey)
	}
	return nil
}

// Resolve returns the offset and length r selects in an object of size bytes,
// following the rules documented on Range.
func (r Range) Resolve(size int64) (off, n int64, err error) {
	switch {
	case r.Off < 0 || r.Len < 0 || r.Suffix < 0:
		return 0, 0, fmt.Errorf("range %+v has a negative field: %w", r, ErrInvalidRange)
	case r.Suffix > 0:
		if size == 0 {
			// HTTP: a suffix range of an empty representation is unsatisfiable.
			return 0, 0, fmt.Errorf("suffix %d of an empty object: %w", r.Suffix, ErrInvalidRange)
		}
		n = min(r.Suffix, size)
		return size - n, n, nil
	case r.Off == 0 && r.Len == 0:
		return 0, size, nil
	case r.Off >= size:
		return 0, 0, fmt.Errorf("range at %d of a %d-byte object: %w", r.Off, size, ErrInvalidRange)
	case r.Len == 0 || r.Len > size-r.Off:
		return r.Off, size - r.Off, nil
	}
	return r.Off, r.Len, nil
}

// CheckPartNumber refuses part numbers S3 refuses.
func CheckPartNumber(n int32) error {
	if n < 1 || n > MaxParts {
		return fmt.Errorf("part number %d outside 1..%d", n, MaxParts)
	}
	return nil
}

// MaxParts is the most parts one multipart upload may have (S3's limit).
const MaxParts = 10000

// CheckCompletedParts checks what CompleteMultipart is given before it looks
// at the stored parts: at least one part, numbers valid and ascending.
func CheckCompletedParts(parts []CompletedPart) error {
	if len(parts) == 0 {
		return errorString("no parts")
	}
	for i, p := range parts {
		if err := CheckPartNumber(p.Number); err != nil {
			return err
		}
		if i > 0 && p.Number <= parts[i-1].Number {
			return fmt.Errorf("part %d follows part %d: parts must be in ascending order", p.Number, parts[i-1].Number)
		}
	}
	return nil
}
