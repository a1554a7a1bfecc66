package config

import (
	"errors"
	"testing"
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
