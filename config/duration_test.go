package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseDuration: Go's units, plus d (24h) and w (7d), alone or mixed;
// everything else is ErrSyntax with the reason.
func TestParseDuration(t *testing.T) {
	const day, week = 24 * time.Hour, 7 * 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0}, {"-0", 0}, {"0s", 0}, {"0d", 0},
		{"100ms", 100 * time.Millisecond}, {"1m30s", 90 * time.Second}, {"1.5h", 90 * time.Minute},
		{"1us", time.Microsecond}, {"1µs", time.Microsecond}, {"3ns", 3},
		{"1d", day}, {"7d", week}, {"2w", 2 * week}, {"1w2d3h", week + 2*day + 3*time.Hour},
		{"1.5d", 36 * time.Hour}, {"0.5w", 84 * time.Hour}, {"1d12h30m", day + 12*time.Hour + 30*time.Minute},
		{"+1d", day}, {"-1d", -day}, {"-2w1s", -(2*week + time.Second)},
		{"15250w", 15250 * week}, // about 292 years: still in range
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"-", "empty"},
		{"1", "a number without a unit"},
		{"1d2", "a number without a unit"},
		{"d", "a unit without a number"},
		{"1dd", `unknown unit "dd"`},
		{"1y", `unknown unit "y"`},
		{"1D", `unknown unit "D"`},
		{"1 d", `unknown unit " d"`},
		{"1.2.3d", `bad number "1.2.3"`},
		{"15251w", "too large"},
		{"9999999999999999999h", "too large"},
		{"15000w15000w", "too large"},
		{"--1s", "a unit without a number"},
	} {
		_, err := ParseDuration(tc.in)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "7d") {
			t.Errorf("ParseDuration(%q) = %v; want ErrSyntax saying %q and showing the units", tc.in, err, tc.why)
		}
	}
	// As an option's value, in Parse.
	c, err := Parse(Default(), "ns_refresh=1s,ns_refresh_max=1d,wal_lease=1w")
	if err == nil {
		t.Errorf("wal_lease=1w (past 10m) accepted: %v", c.WALLease)
	}
	c, err = Parse(Default(), "ns_refresh_max=0.005d,s3_request_timeout=1h")
	if err != nil || c.NSRefreshMax != 432*time.Second {
		t.Errorf("ns_refresh_max=0.005d: %v, %v", c.NSRefreshMax, err)
	}
}
