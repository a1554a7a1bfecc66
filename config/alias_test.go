package config

import (
	"slices"
	"strings"
	"testing"
)

// TestAliases: each peer's name sets the tunable it maps to, as the
// engine's name does, and is documented with it.
func TestAliases(t *testing.T) {
	for _, tc := range []struct {
		opts  string
		check func(Config) bool
	}{
		{"part_size=32M", func(c Config) bool { return c.SegmentMPUChunkSize == 32*mib }},
		// mountpoint-s3's --max-threads is the whole mount's cap; the
		// per-transfer concurrency of goofys and rclone is one file's.
		{"max_threads=16", func(c Config) bool { return c.MaxRequests == 16 && c.SegmentMPUMaxConcurrency == 8 }},
		{"max_concurrency=4", func(c Config) bool { return c.SegmentMPUMaxConcurrency == 4 && c.MaxRequests == 0 }},
		// Later items win, whichever name they use.
		{"segment_mpu_chunk_size=8M,part_size=64M", func(c Config) bool { return c.SegmentMPUChunkSize == 64*mib }},
		{"part_size=64M,segment_mpu_chunk_size=8M", func(c Config) bool { return c.SegmentMPUChunkSize == 8*mib }},
	} {
		c, err := Parse(Default(), tc.opts)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.opts, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("Parse(%q) = %s", tc.opts, c.EncodeChanged(Default()))
		}
		if strings.Contains(c.EncodeChanged(Default()), "part_size") {
			t.Errorf("Encode writes an alias: %s", c.EncodeChanged(Default()))
		}
	}
	// An alias's value is checked as the tunable's: a bad one is named
	// as written, a value out of range by the tunable's name (which the
	// help shows beside the alias).
	for _, tc := range []struct{ opts, name string }{
		{"part_size=1M", "segment_mpu_chunk_size"},
		{"max_threads=-1", "max_requests"},
		{"max_threads=5000", "max_requests"},
		{"max_concurrency=0", "segment_mpu_max_concurrency"},
		{"max_concurrency=x", "max_concurrency"},
	} {
		_, err := Parse(Default(), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", tc.opts, err, tc.name)
		}
	}
	for alias := range optionAliases {
		if !IsKnown(alias) {
			t.Errorf("alias %s is not known to suggestions", alias)
		}
		if v, err := Default().Get(alias); err != nil || v == "" {
			t.Errorf("Get(%s) = %q, %v", alias, v, err)
		}
	}
	if Suggest("part_sise") != "part_size" || Suggest("max_thread") != "max_threads" {
		t.Errorf("no suggestion of an alias: %q, %q", Suggest("part_sise"), Suggest("max_thread"))
	}
	for _, o := range Options() {
		if o.Name == "segment_mpu_max_concurrency" && !slices.Equal(o.Aliases, []string{"max_concurrency"}) {
			t.Errorf("%s aliases %q", o.Name, o.Aliases)
		}
		if o.Name == "max_requests" && !slices.Equal(o.Aliases, []string{"max_threads"}) {
			t.Errorf("%s aliases %q", o.Name, o.Aliases)
		}
	}
	for _, want := range []string{"segment_mpu_chunk_size=<size>  (default 16M), also part_size",
		"segment_mpu_max_concurrency=<integer>  (default 8), also max_concurrency",
		"max_requests=<integer>  (default 0), also max_threads"} {
		if !strings.Contains(strings.Join(strings.Fields(Text()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("Text() lacks %q", want)
		}
	}
	if !strings.Contains(Markdown(), "`segment_mpu_chunk_size` (also `part_size`)") {
		t.Error("Markdown() does not name part_size")
	}
}
