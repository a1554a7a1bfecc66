package config

import (
	"errors"
	"math"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseSize: a size either reads, and then FormatSize writes it back to
// the same number, or fails with ErrSyntax.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "4K", "16MiB", "1g", "4Q", "", "-1", "9223372036854775807", "8589934592G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("ParseSize(%q): %v is not ErrSyntax", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		back, err := ParseSize(FormatSize(n))
		if err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	})
}

// FuzzParse: any option string either fails with *OptionError problems only,
// leaving base as it was, or gives a valid Config that Encode reproduces.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "wal,ro", "data_block_size=64K,stream_segment_bytes=64M",
		"foo=1,data_block_size=4Q", "metrics=[::1]:9090", "metrics=a=b:1",
		"defaults,_netdev,x-systemd.automount,memory_limit=1G",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, opts string) {
		base := Default()
		c, err := Parse(base, opts)
		if err != nil {
			if c != base {
				t.Fatalf("Parse(%q) failed but changed base", opts)
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("Parse(%q): %v is not joined", opts, err)
			}
			for _, e := range joined.Unwrap() {
				var oe *OptionError
				if !errors.As(e, &oe) {
					t.Fatalf("Parse(%q): problem %v is not an *OptionError", opts, e)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse(%q) gave an invalid config: %v", opts, err)
		}
		back, err := Parse(MountDefault(0), c.Encode())
		if err != nil || back != c {
			t.Fatalf("Parse(%q): Encode %q does not read back: %v", opts, c.Encode(), err)
		}
	})
}

// FuzzParseProcCgroup: /proc/self/cgroup either parses, to absolute clean
// paths that stay under the cgroup mount when joined, or fails; never panics.
func FuzzParseProcCgroup(f *testing.F) {
	for _, s := range []string{"0::/\n", "4:memory:/a\n0::/b\n", "0::/../x", "x", "5:memory,hugetlb:/d/e\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v2, v1, err := parseProcCgroup([]byte(s))
		if err != nil {
			return
		}
		for _, p := range []cgroupPath{v2, v1} {
			if p.ok && (!strings.HasPrefix(p.path, "/") || path.Clean(p.path) != p.path) {
				t.Fatalf("parseProcCgroup(%q) gave path %q", s, p.path)
			}
		}
	})
}

// FuzzParseCgroupLimit: a limit is "max" (none) or decimal digits that read
// as that number.
func FuzzParseCgroupLimit(f *testing.F) {
	for _, s := range []string{"max\n", "123\n", "-1", "", "9223372036854771712\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok, err := parseCgroupLimit([]byte(s))
		switch {
		case err != nil:
			if ok || n != 0 {
				t.Fatalf("parseCgroupLimit(%q) = %d, %v with error %v", s, n, ok, err)
			}
		case !ok:
			if strings.TrimSuffix(s, "\n") != "max" {
				t.Fatalf("parseCgroupLimit(%q): no limit", s)
			}
		case strings.TrimLeft(strings.TrimSuffix(s, "\n"), "0123456789") != "",
			strconv.FormatUint(n, 10) != strings.TrimLeft(strings.TrimSuffix(s, "\n"), "0") && n != 0:
			t.Fatalf("parseCgroupLimit(%q) = %d", s, n)
		}
	})
}

// FuzzParseDuration: a duration either reads, and then agrees with
// time.ParseDuration wherever that reads it too and reads back from its
// String, or fails with ErrSyntax.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "1w2d3h", "1.5d", "-1d", "100ms", "1µs", "1", "d", "15251w", ".5d", "1..2h", "+0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		goD, goErr := time.ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("ParseDuration(%q): %v is not ErrSyntax", s, err)
			}
			if goErr == nil && goD != math.MinInt64 {
				t.Fatalf("ParseDuration(%q): %v, but time.ParseDuration reads %v", s, err, goD)
			}
			return
		}
		if goErr == nil && goD != d {
			t.Fatalf("ParseDuration(%q) = %v, time.ParseDuration %v", s, d, goD)
		}
		if back, err := ParseDuration(d.String()); err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v, read back as %v, %v", s, d, back, err)
		}
	})
}
