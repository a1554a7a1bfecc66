package config

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1000", 1000},
		{"007", 7},
		{"4K", 4 << 10},
		{"4k", 4 << 10},
		{"4KiB", 4 << 10},
		{"4kib", 4 << 10},
		{"4KIB", 4 << 10},
		{"16M", 16 << 20},
		{"16MiB", 16 << 20},
		{"1G", 1 << 30},
		{"1gib", 1 << 30},
		{"0K", 0},
		{"8589934591G", 8589934591 << 30},
		{"9223372036854775807", 1<<63 - 1},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSizeBad(t *testing.T) {
	tests := []struct {
		in      string
		wantMsg string // empty: only the class is checked
	}{
		{"4Q", `bad size "4Q": want bytes or a number with K, M or G`},
		{"", `bad size "": want bytes or a number with K, M or G`},
		{"K", ""},
		{"KiB", ""},
		{"-1", ""},
		{"+1", ""},
		{"-1K", ""},
		{"1.5G", ""},
		{"4 K", ""},
		{" 4K", ""},
		{"4K ", ""},
		{"4KB", ""},
		{"4Ki", ""},
		{"4T", ""},
		{"0x10", ""},
		{"9223372036854775808", `bad size "9223372036854775808": too large`},
		{"8589934592G", `bad size "8589934592G": too large`},
		{"99999999999999999999K", ""},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", tt.in, got)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseSize(%q): %v is not ErrSyntax", tt.in, err)
		}
		if tt.wantMsg != "" && err.Error() != tt.wantMsg {
			t.Errorf("ParseSize(%q): %q, want %q", tt.in, err, tt.wantMsg)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1000, "1000"},
		{512, "512"},
		{1024, "1K"},
		{4 << 10, "4K"},
		{1536, "1536"},
		{1 << 20, "1M"},
		{16 << 20, "16M"},
		{(16 << 20) + (1 << 10), "16385K"},
		{1 << 30, "1G"},
		{3 << 30, "3G"},
		{1 << 40, "1024G"},
		{-5, "-5"},
		{1<<63 - 1, "9223372036854775807"},
	}
	for _, tt := range tests {
		got := FormatSize(tt.in)
		if got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in < 0 {
			continue
		}
		back, err := ParseSize(got)
		if err != nil || back != tt.in {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", tt.in, back, err)
		}
	}
}

func TestParseBool(t *testing.T) {
	for _, s := range []string{"true", "TRUE", "on", "On", "yes", "1"} {
		if b, err := parseBool(s); err != nil || !b {
			t.Errorf("parseBool(%q) = %v, %v; want true", s, b, err)
		}
	}
	for _, s := range []string{"false", "off", "no", "NO", "0"} {
		if b, err := parseBool(s); err != nil || b {
			t.Errorf("parseBool(%q) = %v, %v; want false", s, b, err)
		}
	}
	for _, s := range []string{"", "maybe", "2", "y", "t"} {
		if _, err := parseBool(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("parseBool(%q): %v, want ErrSyntax", s, err)
		}
	}
}

func TestParseMemTotal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{"typical", "MemTotal:       16316412 kB\nMemFree:         1234 kB\n", 16316412 * 1024, false},
		{"not first", "Foo: 1 kB\nMemTotal: 2048 kB\n", 2048 * 1024, false},
		{"missing", "MemFree: 1 kB\n", 0, true},
		{"empty", "", 0, true},
		{"no unit", "MemTotal: 2048\n", 0, true},
		{"other unit", "MemTotal: 2048 MB\n", 0, true},
		{"not a number", "MemTotal: lots kB\n", 0, true},
		{"overflow", "MemTotal: 18446744073709551615 kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMemTotal([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseMemTotal = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
