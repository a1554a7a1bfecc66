package staging

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"vol/files/42/0000000001.0", true},
		{".hidden", true},
		{"a/.b/..c/c..", true},
		{"a b/ü/~%", true},
		{".ckptfs-staging", true},
		{".ckptfs-stagingx/y", true},
		{strings.Repeat("a", MaxKeyLen), true},
		{"", false},
		{"/abs", false},
		{"../x", false},
		{"a/../b", false},
		{"a/..", false},
		{"./a", false},
		{"a/./b", false},
		{".", false},
		{"a//b", false},
		{"a/", false},
		{"a\x00b", false},
		{"\xff", false},
		{strings.Repeat("a", MaxKeyLen+1), false},
		{ReservedPrefix, false},
		{ReservedPrefix + "tmp/x", false},
	} {
		err := ValidateKey(tc.key)
		if tc.ok && err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", tc.key, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", tc.key, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"a", true},
		{"a/", true},
		{"a/.", true},  // of "a/.b"
		{"a/..", true}, // of "a/..b"
		{".ckptfs-stag", true},
		{"/a", false},
		{"a//", false},
		{"a/../", false},
		{"a\x00", false},
		{ReservedPrefix, false},
	} {
		err := ValidatePrefix(tc.prefix)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("ValidatePrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
}

func TestValidateMetadata(t *testing.T) {
	for _, tc := range []struct {
		md map[string]string
		ok bool
	}{
		{nil, true},
		{map[string]string{"a-1": "any printable ~!"}, true},
		{map[string]string{"": "x"}, false},
		{map[string]string{"A": "x"}, false},
		{map[string]string{"a_b": "x"}, false},
		{map[string]string{"a": "line\nbreak"}, false},
		{map[string]string{"a": "é"}, false},
		{map[string]string{"a": strings.Repeat("x", MaxMetadataBytes)}, false},
	} {
		err := ValidateMetadata(tc.md)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("ValidateMetadata(%v) = %v, want ok=%v", tc.md, err, tc.ok)
		}
	}
}

func TestRangeResolve(t *testing.T) {
	for _, tc := range []struct {
		r      Range
		size   int64
		off, n int64
		err    bool
	}{
		{Whole(), 0, 0, 0, false},
		{Whole(), 10, 0, 10, false},
		{Bytes(2, 3), 10, 2, 3, false},
		{Bytes(8, 5), 10, 8, 2, false},
		{Bytes(10, 1), 10, 0, 0, true},
		{Bytes(0, 1), 0, 0, 0, true},
		{Bytes(3, 0), 10, 3, 7, false},
		{Suffix(4), 10, 6, 4, false},
		{Suffix(40), 10, 0, 10, false},
		{Suffix(1), 0, 0, 0, true},
		{Range{Off: -1}, 10, 0, 0, true},
		{Range{Len: -1}, 10, 0, 0, true},
	} {
		off, n, err := tc.r.Resolve(tc.size)
		if tc.err {
			if !errors.Is(err, ErrInvalidRange) {
				t.Errorf("%+v of %d: %v, want ErrInvalidRange", tc.r, tc.size, err)
			}
			continue
		}
		if err != nil || off != tc.off || n != tc.n {
			t.Errorf("%+v of %d: %d, %d, %v; want %d, %d", tc.r, tc.size, off, n, err, tc.off, tc.n)
		}
	}
}

// Keys come back from listings of a bucket: whatever ValidateKey accepts
// must be safe to turn into a path, and it must never panic.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a/./b", ".ckptfs-staging/x", "a\x00", "\xff", "a//b", "%2e%2e/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateKey(key) != nil {
			return
		}
		if key == "" || key[0] == '/' || strings.ContainsRune(key, 0) || strings.HasPrefix(key, ReservedPrefix) {
			t.Fatalf("accepted %q", key)
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q with segment %q", key, seg)
			}
		}
		if ValidatePrefix(key) != nil {
			t.Fatalf("key %q is valid but not as a prefix", key)
		}
	})
}
