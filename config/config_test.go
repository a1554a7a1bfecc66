package config

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/ckptfs/ckptfs/segment"
)

// problems returns the *OptionError values of err, in order.
func problems(t *testing.T, err error) []*OptionError {
	t.Helper()
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %v is not a joined error", err)
	}
	var out []*OptionError
	for _, e := range joined.Unwrap() {
		var oe *OptionError
		if !errors.As(e, &oe) {
			t.Fatalf("problem %v (%T) is not an *OptionError", e, e)
		}
		out = append(out, oe)
	}
	return out
}

// problemNames returns the option names of the problems in err.
func problemNames(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, oe := range problems(t, err) {
		out = append(out, oe.Name)
	}
	return out
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default is not valid: %v", err)
	}
	// The seed's defaults.
	want := []struct {
		name, value string
	}{
		{"data_block_size", "4K"}, {"meta_block_size", "4K"},
		{"segment_max_object_bytes", "1G"}, {"segment_mpu_chunk_size", "16M"},
		{"segment_mpu_max_concurrency", "8"}, {"stream_segment_bytes", "1G"},
		{"data_cache_dirty_max_bytes_threshold", "8M"}, {"data_cache_dirty_max_blocks_threshold", "1024"},
		{"segment_buffer_size", "8M"}, {"read_get_max_bytes", "16M"},
		{"format", "stream"}, {"wal", "false"}, {"flush_conflict_policy", "retry"},
		{"flush_on_close", "true"}, {"flush_interval", "0s"}, {"log", "warn"},
		{"memory_limit", "0"}, {"emulate_link", "none"}, {"metrics", ""},
		{"ns_refresh", "1s"}, {"ns_refresh_max", "0s"}, {"allow_other", "false"}, {"ro", "false"},
		{"s3_connect_timeout", "10s"}, {"s3_request_timeout", "1m0s"},
		{"s3_stall_timeout", "30s"}, {"s3_retry_max_time", "2m0s"}, {"op_timeout", "30s"},
	}
	for _, w := range want {
		got, err := c.Get(w.name)
		if err != nil || got != w.value {
			t.Errorf("Default %s = %q, %v; want %q", w.name, got, err, w.value)
		}
	}
	if c.Format != segment.FormatStream {
		t.Errorf("Default Format = %v, want stream", c.Format)
	}
	// With the seed's defaults nothing is sent ahead: the dirty limit is
	// below one piece.
	if c.DirtyLimit() >= c.SegmentMPUChunkSize {
		t.Errorf("Default DirtyLimit %d is not below one piece %d", c.DirtyLimit(), c.SegmentMPUChunkSize)
	}
}

func TestMountDefault(t *testing.T) {
	tests := []struct {
		ram     uint64
		wantMem int64
	}{
		{0, 256 << 20},
		{512 << 20, 256 << 20},
		{1 << 30, 256 << 20},
		{4 << 30, 1 << 30},
		{16 << 30, 4 << 30},
		{(16 << 30) + 12345, 4 << 30},
		{4 * 6170914 << 10, 6026 << 20}, // RAM/4 = 6170914K, rounded down to an even count of MiB
		{32 << 30, 8 << 30},
		{1 << 40, 8 << 30},
	}
	for _, tt := range tests {
		c := MountDefault(tt.ram)
		if err := c.Validate(); err != nil {
			t.Errorf("MountDefault(%d) is not valid: %v", tt.ram, err)
		}
		if c.MemoryLimit != tt.wantMem {
			t.Errorf("MountDefault(%d).MemoryLimit = %s, want %s", tt.ram, FormatSize(c.MemoryLimit), FormatSize(tt.wantMem))
		}
		if c.DataCacheDirtyMaxBytesThreshold != tt.wantMem/2 || c.SegmentBufferSize != tt.wantMem/2 {
			t.Errorf("MountDefault(%d): dirty bytes %d, buffer %d; want both %d", tt.ram,
				c.DataCacheDirtyMaxBytesThreshold, c.SegmentBufferSize, tt.wantMem/2)
		}
		if c.DirtyLimit() != tt.wantMem/2 {
			t.Errorf("MountDefault(%d).DirtyLimit() = %d, want %d", tt.ram, c.DirtyLimit(), tt.wantMem/2)
		}
		if c.StreamSegmentBytes != 64<<20 || c.DataBlockSize != 64<<10 {
			t.Errorf("MountDefault(%d): stream %d, block %d", tt.ram, c.StreamSegmentBytes, c.DataBlockSize)
		}
		// Sending ahead works: a whole object fits in the dirty limit, and
		// the object plus the pieces in flight fit in the budget.
		inFlight := int64(c.SegmentMPUMaxConcurrency) * c.SegmentMPUChunkSize
		if c.DirtyLimit() < c.StreamSegmentBytes || c.StreamSegmentBytes+inFlight > c.MemoryLimit {
			t.Errorf("MountDefault(%d): dirty limit %d, object %d, in flight %d, budget %d",
				tt.ram, c.DirtyLimit(), c.StreamSegmentBytes, inFlight, c.MemoryLimit)
		}
		if c.MemoryLimit%(1<<20) != 0 || c.SegmentBufferSize%(1<<20) != 0 {
			t.Errorf("MountDefault(%d): budget %d is not whole MiB halves", tt.ram, c.MemoryLimit)
		}
	}
}

func TestDirtyLimit(t *testing.T) {
	tests := []struct {
		name                 string
		bytes, blocks, block int64
		buffer               int64
		want                 int64
	}{
		{"seed defaults", 8 << 20, 1024, 4 << 10, 8 << 20, 8 << 20},
		{"raised as the seed advises", 1 << 30, 1024, 4 << 10, 1 << 30, 1 << 30},
		{"blocks dominate", 8 << 20, 4096, 64 << 10, 1 << 30, 256 << 20},
		{"bytes dominate", 512 << 20, 1024, 64 << 10, 1 << 30, 512 << 20},
		{"buffer caps", 1 << 30, 1 << 20, 64 << 10, 32 << 20, 32 << 20},
		{"blocks at the seed default with 64K blocks", 0, 1024, 64 << 10, 1 << 30, 64 << 20},
		{"saturates", 0, 1 << 62, 1 << 20, 1 << 62, 1 << 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.DataCacheDirtyMaxBytesThreshold = tt.bytes
			c.DataCacheDirtyMaxBlocksThreshold = tt.blocks
			c.DataBlockSize = tt.block
			c.SegmentBufferSize = tt.buffer
			if got := c.DirtyLimit(); got != tt.want {
				t.Fatalf("DirtyLimit() = %d, want %d", got, tt.want)
			}
		})
	}
	if got := Default().DirtyLimit(); got != 8<<20 {
		t.Fatalf("Default().DirtyLimit() = %d, want 8 MiB", got)
	}
}

func TestEffectiveStreamSegmentBytes(t *testing.T) {
	tests := []struct{ stream, max, want int64 }{
		{1 << 30, 1 << 30, 1 << 30},
		{64 << 20, 1 << 30, 64 << 20},
		{0, 1 << 30, 0},
		{2 << 30, 1 << 30, 1 << 30},
		{1 << 30, 256 << 20, 256 << 20},
	}
	for _, tt := range tests {
		c := Default()
		c.StreamSegmentBytes, c.SegmentMaxObjectBytes = tt.stream, tt.max
		if got := c.EffectiveStreamSegmentBytes(); got != tt.want {
			t.Errorf("stream %d, max %d: got %d, want %d", tt.stream, tt.max, got, tt.want)
		}
	}
}

// The specification caps stream_segment_bytes at segment_max_object_bytes:
// a larger target is accepted and the effective target is the cap.
func TestStreamSegmentBytesCapped(t *testing.T) {
	c, err := Parse(Default(), "segment_max_object_bytes=64M,stream_segment_bytes=256M")
	if err != nil {
		t.Fatalf("a target above segment_max_object_bytes: %v, want it accepted and capped", err)
	}
	if got := c.EffectiveStreamSegmentBytes(); got != 64<<20 {
		t.Fatalf("effective target %s, want 64M", FormatSize(got))
	}
	if c.StreamSegmentBytes != 256<<20 {
		t.Fatalf("stream_segment_bytes read back as %s, want 256M as given", FormatSize(c.StreamSegmentBytes))
	}
}

func TestLogLevel(t *testing.T) {
	tests := []struct {
		in   string
		want zapcore.Level
	}{
		{"debug", zapcore.DebugLevel},
		{"info", zapcore.InfoLevel},
		{"warn", zapcore.WarnLevel},
		{"error", zapcore.ErrorLevel},
		{"ERROR", zapcore.ErrorLevel},
	}
	for _, tt := range tests {
		c, err := Parse(Default(), "log="+tt.in)
		if err != nil {
			t.Fatalf("log=%s: %v", tt.in, err)
		}
		if got := c.Log.ZapLevel(); got != tt.want {
			t.Errorf("log=%s: ZapLevel %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := Default().Log.ZapLevel(); got != zapcore.WarnLevel {
		t.Errorf("default ZapLevel %v, want warn", got)
	}
}

// TestSetEveryOption sets every option to good values and to values that do
// not read.
func TestSetEveryOption(t *testing.T) {
	tests := []struct {
		name string
		good map[string]string // value given -> value Get returns
		bad  []string          // values that are ErrSyntax
	}{
		{"data_block_size", map[string]string{"512": "512", "64K": "64K", "1m": "1M", "8KiB": "8K"}, []string{"4Q", "", "4KB", "-4K"}},
		{"meta_block_size", map[string]string{"16k": "16K", "65536": "64K"}, []string{"big", "1.5K"}},
		{"segment_max_object_bytes", map[string]string{"1G": "1G", "256M": "256M", "1024M": "1G"}, []string{"1 G", "1GB"}},
		{"segment_mpu_chunk_size", map[string]string{"5M": "5M", "8MiB": "8M"}, []string{"5MB", "M"}},
		{"segment_mpu_max_concurrency", map[string]string{"1": "1", "64": "64", "008": "8"}, []string{"many", "1K", "1.0", "", "99999999999999999999"}},
		{"max_requests", map[string]string{"0": "0", "64": "64", "016": "16"}, []string{"unlimited", "1K", "", "2.5"}},
		{"stream_segment_bytes", map[string]string{"0": "0", "4M": "4M", "1g": "1G"}, []string{"off", "-1"}},
		{"data_cache_dirty_max_bytes_threshold", map[string]string{"0": "0", "1G": "1G"}, []string{"1X"}},
		{"data_cache_dirty_max_blocks_threshold", map[string]string{"1": "1", "4096": "4096"}, []string{"4K", "x"}},
		{"segment_buffer_size", map[string]string{"1G": "1G", "3000": "3000"}, []string{"lots"}},
		{"read_get_max_bytes", map[string]string{"64M": "64M"}, []string{"64Mi"}},
		{"format", map[string]string{"stream": "stream", "parted": "parted", "Parted": "parted"}, []string{"", "log", "2"}},
		{"wal", map[string]string{"on": "true", "off": "false", "yes": "true", "0": "false"}, []string{"", "maybe"}},
		{"wal_lease", map[string]string{"3s": "3s", "1m": "1m0s", "10m": "10m0s"}, []string{"30", "soon"}},
		{"flush_conflict_policy", map[string]string{"retry": "retry", "failfast": "failfast"}, []string{"fail-fast", "abort"}},
		{"flush_on_close", map[string]string{"false": "false", "true": "true"}, []string{"never"}},
		{"flush_interval", map[string]string{"0": "0s", "100ms": "100ms", "1m30s": "1m30s", "5s": "5s"}, []string{"5", "1 s", "soon"}},
		{"log", map[string]string{"debug": "debug", "Info": "info", "warn": "warn", "error": "error"}, []string{"warning", "trace"}},
		{"memory_limit", map[string]string{"0": "0", "2G": "2G"}, []string{"2 G", "auto"}},
		{"emulate_link", map[string]string{"none": "none", "directory": "directory", "general": "general"}, []string{"fast", "dir"}},
		{"namespace", map[string]string{"v1": "v1", "v2": "v2", "V2": "v2"}, []string{"", "2", "v3"}},
		{"metrics", map[string]string{"": "", "127.0.0.1:9090": "127.0.0.1:9090", "[::1]:0": "[::1]:0"}, nil},
		{"ns_refresh", map[string]string{"10ms": "10ms", "2s": "2s"}, []string{"2", "often"}},
		{"ns_refresh_max", map[string]string{"1s": "1s", "10m": "10m0s"}, []string{"10", "rarely"}},
		{"s3_connect_timeout", map[string]string{"1s": "1s", "2m": "2m0s"}, []string{"10", "fast"}},
		{"s3_request_timeout", map[string]string{"90s": "1m30s"}, []string{"1 m"}},
		{"s3_stall_timeout", map[string]string{"5s": "5s"}, []string{"never"}},
		{"s3_retry_max_time", map[string]string{"1h": "1h0m0s"}, []string{"forever"}},
		{"op_timeout", map[string]string{"5s": "5s", "1m": "1m0s"}, []string{"soon"}},
		{"allow_other", map[string]string{"1": "true", "no": "false"}, []string{"everyone"}},
		{"ro", map[string]string{"yes": "true", "false": "false"}, []string{"rw"}},
		{"allow_root", map[string]string{"true": "true", "0": "false"}, []string{"root"}},
		{"auto_unmount", map[string]string{"on": "true", "off": "false"}, []string{"auto"}},
		{"uid", map[string]string{"": "", "0": "0", "1000": "1000", "4294967295": "4294967295"}, []string{"-1", "root", "4294967296", "1e3"}},
		{"gid", map[string]string{"": "", "100": "100"}, []string{"-5", "users"}},
		{"umask", map[string]string{"022": "0022", "0": "0000", "77": "0077"}, []string{"", "0o22", "089", "u=rwx"}},
		{"file_mode", map[string]string{"": "", "0644": "0644", "600": "0600"}, []string{"rw-r--r--", "0x1a4", "8"}},
		{"dir_mode", map[string]string{"": "", "0755": "0755", "1777": "1777"}, []string{"rwx", "9"}},
		{"noexec", map[string]string{"true": "true", "false": "false"}, []string{"never"}},
		{"nosuid", map[string]string{"true": "true", "false": "false"}, []string{"never"}},
		{"nodev", map[string]string{"true": "true", "false": "false"}, []string{"never"}},
		{"noatime", map[string]string{"true": "true", "false": "false"}, []string{"relatime"}},
		{"intr", map[string]string{"true": "true", "false": "false"}, []string{"soft"}},
		{"gc", map[string]string{"on": "true", "off": "false"}, []string{"sometimes"}},
		{"gc_interval", map[string]string{"5s": "5s", "1h": "1h0m0s"}, []string{"5", "hourly"}},
		{"gc_files", map[string]string{"1": "1", "5000": "5000"}, []string{"many", "1K"}},
		{"gc_keep", map[string]string{"0": "0", "3": "3"}, []string{"all", "-"}},
		{"gc_keep_for", map[string]string{"0": "0s", "7d": "168h0m0s"}, []string{"week"}},
		{"gc_grace", map[string]string{"2s": "2s", "1h": "1h0m0s"}, []string{"2"}},
		{"gc_min_age", map[string]string{"0": "0s", "10m": "10m0s"}, []string{"10"}},
		{"gc_ns_lag", map[string]string{"0": "0s", "11m": "11m0s"}, []string{"11"}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.name] = true
		t.Run(tt.name, func(t *testing.T) {
			for in, want := range tt.good {
				c := Default()
				if err := c.Set(tt.name, in); err != nil {
					t.Fatalf("Set(%q): %v", in, err)
				}
				if got, _ := c.Get(tt.name); got != want {
					t.Errorf("Set(%q): Get = %q, want %q", in, got, want)
				}
			}
			for _, in := range tt.bad {
				c := Default()
				err := c.Set(tt.name, in)
				var oe *OptionError
				if !errors.As(err, &oe) || !errors.Is(err, ErrSyntax) {
					t.Fatalf("Set(%q) = %v, want an *OptionError wrapping ErrSyntax", in, err)
				}
				if oe.Name != tt.name || oe.Value != in || oe.Allowed == "" {
					t.Errorf("Set(%q): OptionError %+v", in, oe)
				}
				if c != Default() {
					t.Errorf("Set(%q) failed but changed the config", in)
				}
			}
		})
	}
	for _, o := range Options() {
		if !seen[o.Name] {
			t.Errorf("option %s has no case in this test", o.Name)
		}
	}
}

func TestSetUnknown(t *testing.T) {
	c := Default()
	err := c.Set("foo", "1")
	var oe *OptionError
	if !errors.As(err, &oe) || !errors.Is(err, ErrUnknownOption) || oe.Name != "foo" {
		t.Fatalf("Set(foo) = %v, want an *OptionError wrapping ErrUnknownOption", err)
	}
	if !strings.HasPrefix(err.Error(), `unknown option "foo" (known: data_block_size, meta_block_size, `) ||
		!strings.HasSuffix(err.Error(), "allow_other, ro, allow_root, auto_unmount, uid, gid, umask, file_mode, dir_mode, noexec, nosuid, nodev, noatime, intr, gc, gc_interval, gc_files, gc_keep, gc_keep_for, gc_grace, gc_min_age, gc_ns_lag, namespace, "+
			"endpoint, region, profile, credentials_file, path_style, sse, sse_kms_key_id, storage_class, requester_pays, ca_bundle, checksum, log_file, create, mount_timeout, single_writer)") {
		t.Errorf("message %q", err)
	}
	if _, err := c.Get("foo"); !errors.Is(err, ErrUnknownOption) {
		t.Errorf("Get(foo) = %v, want ErrUnknownOption", err)
	}
}

// TestValidate checks every rule: each case breaks rules on purpose and names
// the options that must be reported, no more and no fewer.
func TestRefreshMax(t *testing.T) {
	for _, tt := range []struct {
		refresh, most, want time.Duration
	}{
		{time.Second, 0, 10 * time.Second},
		{time.Minute, 0, time.Minute},
		{time.Second, 30 * time.Second, 30 * time.Second},
	} {
		c := Default()
		c.NSRefresh, c.NSRefreshMax = tt.refresh, tt.most
		if got := c.RefreshMax(); got != tt.want {
			t.Errorf("ns_refresh=%v ns_refresh_max=%v: RefreshMax = %v, want %v", tt.refresh, tt.most, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"default", func(c *Config) {}, nil},
		{"block sizes at their bounds", func(c *Config) {
			c.DataBlockSize, c.MetaBlockSize = 512, 512
		}, nil},
		{"block sizes at their upper bounds", func(c *Config) {
			c.DataBlockSize, c.MetaBlockSize = 1<<20, 64<<10
			c.SegmentBufferSize = 1 << 20
		}, nil},
		{"data block not a power of two", func(c *Config) { c.DataBlockSize = 3000 }, []string{"data_block_size"}},
		{"data block too small", func(c *Config) { c.DataBlockSize = 256 }, []string{"data_block_size"}},
		{"data block too large", func(c *Config) {
			c.DataBlockSize = 2 << 20
			c.SegmentBufferSize, c.ReadGetMaxBytes = 2<<20, 2<<20
		}, []string{"data_block_size"}},
		{"data block zero", func(c *Config) { c.DataBlockSize = 0 }, []string{"data_block_size"}},
		{"meta block too large", func(c *Config) { c.MetaBlockSize = 128 << 10 }, []string{"meta_block_size"}},
		{"meta block not a power of two", func(c *Config) { c.MetaBlockSize = 5000 }, []string{"meta_block_size"}},
		{"max object at its bounds", func(c *Config) {
			c.SegmentMaxObjectBytes, c.SegmentMPUChunkSize, c.StreamSegmentBytes = 1<<20, 1<<20, 0
		}, []string{"segment_mpu_chunk_size"}}, // 1M chunk is under S3's 5M
		{"max object too small", func(c *Config) {
			c.SegmentMaxObjectBytes = 512 << 10
		}, []string{"segment_max_object_bytes", "segment_mpu_chunk_size"}},
		{"max object above 1G", func(c *Config) { c.SegmentMaxObjectBytes = 1<<30 + 1 }, []string{"segment_max_object_bytes"}},
		{"max object 2G", func(c *Config) { c.SegmentMaxObjectBytes = 2 << 30 }, []string{"segment_max_object_bytes"}},
		{"chunk under 5M", func(c *Config) { c.SegmentMPUChunkSize = 5<<20 - 1 }, []string{"segment_mpu_chunk_size"}},
		{"chunk exactly 5M", func(c *Config) { c.SegmentMPUChunkSize = 5 << 20 }, nil},
		{"chunk above max object", func(c *Config) {
			c.SegmentMaxObjectBytes, c.SegmentMPUChunkSize, c.StreamSegmentBytes = 64<<20, 128<<20, 64<<20
		}, []string{"segment_mpu_chunk_size"}},
		{"chunk equal to max object", func(c *Config) {
			c.SegmentMaxObjectBytes, c.SegmentMPUChunkSize, c.StreamSegmentBytes = 64<<20, 64<<20, 64<<20
		}, nil},
		{"concurrency zero", func(c *Config) { c.SegmentMPUMaxConcurrency = 0 }, []string{"segment_mpu_max_concurrency"}},
		{"concurrency 65", func(c *Config) { c.SegmentMPUMaxConcurrency = 65 }, []string{"segment_mpu_max_concurrency"}},
		{"concurrency 1", func(c *Config) { c.SegmentMPUMaxConcurrency = 1 }, nil},
		{"concurrency 64", func(c *Config) { c.SegmentMPUMaxConcurrency = 64 }, nil},
		{"requests negative", func(c *Config) { c.MaxRequests = -1 }, []string{"max_requests"}},
		{"requests 4097", func(c *Config) { c.MaxRequests = 4097 }, []string{"max_requests"}},
		{"requests 0 (no cap)", func(c *Config) { c.MaxRequests = 0 }, nil},
		{"requests 1", func(c *Config) { c.MaxRequests = 1 }, nil},
		{"requests 4096", func(c *Config) { c.MaxRequests = 4096 }, nil},
		{"stream zero sends nothing ahead", func(c *Config) { c.StreamSegmentBytes = 0 }, nil},
		{"s3 timeouts below a second", func(c *Config) {
			c.S3ConnectTimeout, c.S3RequestTimeout, c.S3StallTimeout, c.S3RetryMaxTime = 0, time.Millisecond, 999*time.Millisecond, 0
		}, []string{"s3_connect_timeout", "s3_request_timeout", "s3_stall_timeout", "s3_retry_max_time"}},
		{"s3 timeouts above their bounds", func(c *Config) {
			c.S3ConnectTimeout, c.S3RequestTimeout, c.S3StallTimeout, c.S3RetryMaxTime = 11*time.Minute, 2*time.Hour, 2*time.Hour, 2*time.Hour
		}, []string{"s3_connect_timeout", "s3_request_timeout", "s3_stall_timeout", "s3_retry_max_time"}},
		{"op timeout below a second", func(c *Config) { c.OpTimeout = 999 * time.Millisecond }, []string{"op_timeout"}},
		{"op timeout above an hour", func(c *Config) { c.OpTimeout = 2 * time.Hour }, []string{"op_timeout"}},
		{"stream negative", func(c *Config) { c.StreamSegmentBytes = -1 }, []string{"stream_segment_bytes"}},
		{"stream above max object is capped, not refused", func(c *Config) { c.SegmentMaxObjectBytes = 256 << 20 }, nil},
		{"dirty bytes negative", func(c *Config) { c.DataCacheDirtyMaxBytesThreshold = -1 }, []string{"data_cache_dirty_max_bytes_threshold"}},
		{"dirty bytes zero", func(c *Config) { c.DataCacheDirtyMaxBytesThreshold = 0 }, nil},
		{"dirty blocks zero", func(c *Config) { c.DataCacheDirtyMaxBlocksThreshold = 0 }, []string{"data_cache_dirty_max_blocks_threshold"}},
		{"dirty blocks too many", func(c *Config) { c.DataCacheDirtyMaxBlocksThreshold = 1<<32 + 1 }, []string{"data_cache_dirty_max_blocks_threshold"}},
		{"buffer below a block", func(c *Config) { c.SegmentBufferSize = 2048 }, []string{"segment_buffer_size"}},
		{"read get below a block", func(c *Config) {
			c.DataBlockSize, c.SegmentBufferSize, c.ReadGetMaxBytes = 64<<10, 1<<30, 32<<10
		}, []string{"read_get_max_bytes"}},
		{"read get equal to a block", func(c *Config) { c.ReadGetMaxBytes = 4 << 10 }, nil},
		{"read get above 1G", func(c *Config) { c.ReadGetMaxBytes = 2 << 30 }, []string{"read_get_max_bytes"}},
		{"format unset", func(c *Config) { c.Format = 0 }, []string{"format"}},
		{"format parted", func(c *Config) { c.Format = segment.FormatParted }, nil},
		{"conflict policy unset", func(c *Config) { c.FlushConflictPolicy = 0 }, []string{"flush_conflict_policy"}},
		{"flush interval off", func(c *Config) { c.FlushInterval = 0 }, nil},
		{"flush interval 100ms", func(c *Config) { c.FlushInterval = 100 * time.Millisecond }, nil},
		{"flush interval 99ms", func(c *Config) { c.FlushInterval = 99 * time.Millisecond }, []string{"flush_interval"}},
		{"flush interval negative", func(c *Config) { c.FlushInterval = -time.Second }, []string{"flush_interval"}},
		{"wal lease too short", func(c *Config) { c.WALLease = time.Second }, []string{"wal_lease"}},
		{"wal lease too long", func(c *Config) { c.WALLease = time.Hour }, []string{"wal_lease"}},
		{"log unset", func(c *Config) { c.Log = 0 }, []string{"log"}},
		{"log beyond error", func(c *Config) { c.Log = LogError + 1 }, []string{"log"}},
		{"memory limit negative", func(c *Config) { c.MemoryLimit = -1 }, []string{"memory_limit"}},
		{"memory limit below one piece", func(c *Config) { c.MemoryLimit = 8 << 20 }, []string{"memory_limit"}},
		{"memory limit below the dirty limit", func(c *Config) {
			c.DataCacheDirtyMaxBytesThreshold, c.SegmentBufferSize, c.MemoryLimit = 1<<30, 1<<30, 512<<20
		}, []string{"memory_limit"}},
		{"memory limit equal to the dirty limit", func(c *Config) {
			c.DataCacheDirtyMaxBytesThreshold, c.SegmentBufferSize, c.MemoryLimit = 1<<30, 1<<30, 1<<30
		}, nil},
		{"link unset", func(c *Config) { c.EmulateLink = 0 }, []string{"emulate_link"}},
		{"link general", func(c *Config) { c.EmulateLink = LinkGeneral }, nil},
		{"namespace unset", func(c *Config) { c.Namespace = 0 }, []string{"namespace"}},
		{"namespace past v2", func(c *Config) { c.Namespace = NamespaceV2 + 1 }, []string{"namespace"}},
		{"namespace v2", func(c *Config) { c.Namespace = NamespaceV2 }, nil},
		{"metrics host:port", func(c *Config) { c.Metrics = "localhost:9090" }, nil},
		{"metrics any host", func(c *Config) { c.Metrics = ":9090" }, nil},
		{"metrics ipv6", func(c *Config) { c.Metrics = "[::1]:9090" }, nil},
		{"metrics without port", func(c *Config) { c.Metrics = "localhost" }, []string{"metrics"}},
		{"metrics named port", func(c *Config) { c.Metrics = "localhost:http" }, []string{"metrics"}},
		{"metrics port too large", func(c *Config) { c.Metrics = "localhost:65536" }, []string{"metrics"}},
		{"metrics empty port", func(c *Config) { c.Metrics = "localhost:" }, []string{"metrics"}},
		{"metrics comma in host", func(c *Config) { c.Metrics = "a,b:80" }, []string{"metrics"}},
		{"ns refresh 10ms", func(c *Config) { c.NSRefresh = 10 * time.Millisecond }, nil},
		{"ns refresh 9ms", func(c *Config) { c.NSRefresh = 9 * time.Millisecond }, []string{"ns_refresh"}},
		{"ns refresh zero", func(c *Config) { c.NSRefresh = 0 }, []string{"ns_refresh"}},
		{"ns refresh max equal", func(c *Config) { c.NSRefreshMax = c.NSRefresh }, nil},
		{"ns refresh max 10m", func(c *Config) { c.NSRefreshMax = 10 * time.Minute }, nil},
		{"ns refresh max over 10m", func(c *Config) { c.NSRefreshMax = 10*time.Minute + time.Millisecond }, []string{"ns_refresh_max"}},
		{"ns refresh max below ns refresh", func(c *Config) { c.NSRefreshMax = c.NSRefresh - time.Millisecond }, []string{"ns_refresh_max"}},
		// Raising ns_refresh past the default bound alone is fine: the
		// bound follows it (RefreshMax).
		{"ns refresh over the default max", func(c *Config) { c.NSRefresh = time.Minute }, nil},
		{"ns refresh over a max set", func(c *Config) { c.NSRefresh, c.NSRefreshMax = time.Minute, 30*time.Second }, []string{"ns_refresh_max"}},
		{"gc interval a second", func(c *Config) { c.GCInterval = time.Second }, nil},
		{"gc interval past a day", func(c *Config) { c.GCInterval = 25 * time.Hour }, []string{"gc_interval"}},
		{"gc keep negative", func(c *Config) { c.GCKeep = -1 }, []string{"gc_keep"}},
		{"gc keep all", func(c *Config) { c.GCKeep = 0 }, nil},
		{"gc keep for negative", func(c *Config) { c.GCKeepFor = -time.Second }, []string{"gc_keep_for"}},
		{"gc grace below a second", func(c *Config) { c.GCGrace = 500 * time.Millisecond }, []string{"gc_grace"}},
		{"gc short settings", func(c *Config) { c.GCGrace, c.GCMinAge, c.GCNSLag, c.GCKeepFor = time.Second, 0, 0, 0 }, nil},
		{"gc files none", func(c *Config) { c.GCFiles = 0 }, []string{"gc_files"}},
		{"everything wrong at once", func(c *Config) { *c = Config{} }, []string{
			"data_block_size", "meta_block_size", "segment_max_object_bytes",
			"segment_mpu_chunk_size", "segment_mpu_max_concurrency",
			"data_cache_dirty_max_blocks_threshold", "format", "flush_conflict_policy",
			"wal_lease", "log", "nodev", "emulate_link", "namespace", "gc_interval", "gc_files", "gc_grace", "ns_refresh",
			"s3_connect_timeout", "s3_request_timeout", "s3_stall_timeout", "s3_retry_max_time", "op_timeout",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.change(&c)
			err := c.Validate()
			got := problemNames(t, err)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Validate reports %v, want %v\n%v", got, tt.want, err)
			}
			for _, oe := range problems(t, err) {
				if !errors.Is(oe, ErrInvalidValue) {
					t.Errorf("%v does not wrap ErrInvalidValue", oe)
				}
				if want, _ := c.Get(oe.Name); oe.Value != want {
					t.Errorf("%v: Value %q, want the current value %q", oe, oe.Value, want)
				}
			}
		})
	}
}

func TestValidateMessages(t *testing.T) {
	tests := []struct {
		opts string
		want []string
	}{
		{"segment_mpu_chunk_size=1M", []string{"option segment_mpu_chunk_size=1M: must be at least 5M (S3's minimum part size)"}},
		{"data_block_size=4Q", []string{`option data_block_size=4Q: bad size "4Q": want bytes or a number with K, M or G`}},
		{"segment_mpu_chunk_size=32M,segment_max_object_bytes=16M,stream_segment_bytes=0", []string{
			"option segment_mpu_chunk_size=32M: must be at most segment_max_object_bytes=16M",
		}},
		{"read_get_max_bytes=16K,data_block_size=64K", []string{"option read_get_max_bytes=16K: must be at least data_block_size=64K"}},
		{"segment_max_object_bytes=2G", []string{"option segment_max_object_bytes=2G: must be at most 1G (the most a block pointer addresses in one object)"}},
		{"data_block_size", []string{"option data_block_size: needs a value: data_block_size=<size>"}},
		{"format=tail", []string{`option format=tail: bad value "tail": want stream or parted`}},
		{"namespace=v3", []string{`option namespace=v3: bad value "v3": want v1 or v2`}},
		{"wal=maybe", []string{`option wal=maybe: bad boolean "maybe": want true, false, on, off, yes, no, 1 or 0`}},
	}
	for _, tt := range tests {
		_, err := Parse(Default(), tt.opts)
		var got []string
		for _, oe := range problems(t, err) {
			got = append(got, oe.Error())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Parse(%q):\n got %q\nwant %q", tt.opts, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		opts   string
		change func(c *Config) // what opts does to Default()
	}{
		{"empty", "", func(c *Config) {}},
		{"empty items", ",,  ,", func(c *Config) {}},
		{"one size", "data_block_size=64K", func(c *Config) { c.DataBlockSize = 64 << 10 }},
		{"bare booleans", "wal,allow_other,ro", func(c *Config) { c.WAL, c.AllowOther, c.ReadOnly = true, true, true }},
		{"boolean off", "flush_on_close=off", func(c *Config) { c.FlushOnClose = false }},
		{"several -o joined", "wal,log=debug,format=parted,emulate_link=general",
			func(c *Config) {
				c.WAL, c.Log, c.Format, c.EmulateLink = true, LogDebug, segment.FormatParted, LinkGeneral
			}},
		{"later wins", "log=debug,log=error", func(c *Config) { c.Log = LogError }},
		{"namespace", "namespace=v2", func(c *Config) { c.Namespace = NamespaceV2 }},
		{"namespace back to v1", "namespace=V2,namespace=v1", func(c *Config) {}},
		{"spaces around items", " wal , log=info ", func(c *Config) { c.WAL, c.Log = true, LogInfo }},
		{"generic mount flags ignored", "auto,noauto,user,nouser,users,_netdev,nofail,defaults,x-systemd.automount,create,single_writer",
			func(c *Config) {}},
		{"mount flags on", "ro,noexec,nosuid,nodev,noatime",
			func(c *Config) { c.ReadOnly, c.NoExec, c.NoSuid, c.NoDev, c.NoAtime = true, true, true, true, true }},
		{"mount flags off", "ro,noexec,noatime,rw,exec,suid,atime",
			func(c *Config) { c.NoSuid = false }},
		{"relatime and strictatime turn noatime off", "noatime,relatime", func(c *Config) {}},
		{"strictatime", "noatime,strictatime", func(c *Config) {}},
		{"intr", "intr", func(c *Config) { c.Intr = true }},
		{"nointr turns intr off", "intr,nointr", func(c *Config) {}},
		{"later flag wins", "exec,noexec,suid,nosuid", func(c *Config) { c.NoExec = true }},
		{"fstab line", "defaults,_netdev,noatime,stream_segment_bytes=64M,memory_limit=1G,x-systemd.requires=network-online.target",
			func(c *Config) { c.StreamSegmentBytes, c.MemoryLimit, c.NoAtime = 64<<20, 1<<30, true }},
		{"ownership", "uid=1000,gid=100,umask=027,file_mode=0664,dir_mode=0775",
			func(c *Config) { c.UID, c.GID, c.Umask, c.FileMode, c.DirMode = 1000, 100, 0o27, 0o664, 0o775 }},
		{"ownership back to each file's own", "uid=1000,uid=,file_mode=0600,file_mode=",
			func(c *Config) {}},
		{"allow_root and auto_unmount", "allow_root,auto_unmount", func(c *Config) { c.AllowRoot, c.AutoUnmount = true, true }},
		{"raised limits as the seed advises", "data_cache_dirty_max_bytes_threshold=1G,segment_buffer_size=1G,stream_segment_bytes=1G",
			func(c *Config) { c.DataCacheDirtyMaxBytesThreshold, c.SegmentBufferSize = 1<<30, 1<<30 }},
		{"durations", "flush_interval=30s,ns_refresh=250ms",
			func(c *Config) { c.FlushInterval, c.NSRefresh = 30*time.Second, 250*time.Millisecond }},
		{"metrics", "metrics=127.0.0.1:9100", func(c *Config) { c.Metrics = "127.0.0.1:9100" }},
		{"metrics off", "metrics=:9100,metrics=", func(c *Config) {}},
		{"every size unit", "segment_mpu_chunk_size=8MiB,read_get_max_bytes=4194304,meta_block_size=16kib",
			func(c *Config) { c.SegmentMPUChunkSize, c.ReadGetMaxBytes, c.MetaBlockSize = 8<<20, 4<<20, 16<<10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := Default()
			tt.change(&want)
			got, err := Parse(Default(), tt.opts)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.opts, err)
			}
			if got != want {
				t.Fatalf("Parse(%q) changed %q, want %q", tt.opts, got.EncodeChanged(Default()), want.EncodeChanged(Default()))
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		opts  string
		want  []string // option names reported, in order
		class []error  // the class of each
	}{
		{"unknown", "foo=1", []string{"foo"}, []error{ErrUnknownOption}},
		{"unknown bare", "bar", []string{"bar"}, []error{ErrUnknownOption}},
		{"generic flag with a value is not generic", "rw=1", []string{"rw"}, []error{ErrUnknownOption}},
		{"bare non-boolean", "memory_limit", []string{"memory_limit"}, []error{ErrSyntax}},
		{"nonempty refused", "nonempty", []string{"nonempty"}, []error{ErrInvalidValue}},
		// A device node comes from the bucket: a mount is always nodev.
		{"dev refused", "dev", []string{"dev"}, []error{ErrInvalidValue}},
		{"nodev=false refused", "nodev=false", []string{"nodev"}, []error{ErrInvalidValue}},
		{"alias with a value is unknown", "exec=1", []string{"exec"}, []error{ErrUnknownOption}},
		{"allow_root with allow_other", "allow_other,allow_root", []string{"allow_root"}, []error{ErrInvalidValue}},
		{"uid (uid_t)-1", "uid=4294967295", []string{"uid"}, []error{ErrInvalidValue}},
		{"modes out of range", "umask=1000,file_mode=4755,dir_mode=2775",
			[]string{"umask", "file_mode", "dir_mode"}, []error{ErrInvalidValue, ErrInvalidValue, ErrInvalidValue}},
		{"bad unit", "data_block_size=4Q", []string{"data_block_size"}, []error{ErrSyntax}},
		{"out of range", "segment_mpu_max_concurrency=100", []string{"segment_mpu_max_concurrency"}, []error{ErrInvalidValue}},
		{"several problems at once",
			"foo,data_block_size=4Q,segment_mpu_chunk_size=1M,wal=perhaps,segment_mpu_max_concurrency=100,flush_interval=10ms,metrics=nowhere",
			[]string{"foo", "data_block_size", "wal", "segment_mpu_chunk_size", "segment_mpu_max_concurrency", "flush_interval", "metrics"},
			[]error{ErrUnknownOption, ErrSyntax, ErrSyntax, ErrInvalidValue, ErrInvalidValue, ErrInvalidValue, ErrInvalidValue}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := MountDefault(8 << 30)
			got, err := Parse(base, tt.opts)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tt.opts)
			}
			if got != base {
				t.Errorf("Parse(%q) failed but did not return base", tt.opts)
			}
			ps := problems(t, err)
			if names := problemNames(t, err); !slices.Equal(names, tt.want) {
				t.Fatalf("Parse(%q) reports %v, want %v\n%v", tt.opts, names, tt.want, err)
			}
			for i, oe := range ps {
				if !errors.Is(oe, tt.class[i]) {
					t.Errorf("%v: want class %v", oe, tt.class[i])
				}
			}
			// The first problem is found with errors.As on the whole error.
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Name != tt.want[0] {
				t.Errorf("errors.As found %v, want option %s", oe, tt.want[0])
			}
			if strings.Count(err.Error(), "\n") != len(tt.want)-1 {
				t.Errorf("message is not one line per problem:\n%v", err)
			}
		})
	}
}

// TestEncodeRoundTrip reads configurations back from Encode and
// EncodeChanged, on top of bases they do not share.
func TestEncodeRoundTrip(t *testing.T) {
	every := Default()
	every.DataBlockSize = 1 << 20
	every.MetaBlockSize = 512
	every.SegmentMaxObjectBytes = 768 << 20
	every.SegmentMPUChunkSize = 5 << 20
	every.SegmentMPUMaxConcurrency = 3
	every.MaxRequests = 32
	every.StreamSegmentBytes = 1000
	every.DataCacheDirtyMaxBytesThreshold = 12345
	every.DataCacheDirtyMaxBlocksThreshold = 7
	every.SegmentBufferSize = 3 << 20
	every.ReadGetMaxBytes = (1 << 20) + 1
	every.Format = segment.FormatParted
	every.WAL = true
	every.WALLease = 45 * time.Second
	every.FlushConflictPolicy = ConflictFailFast
	every.FlushOnClose = false
	every.FlushInterval = 1500 * time.Millisecond
	every.Log = LogDebug
	every.MemoryLimit = 5<<20 + 512
	every.EmulateLink = LinkDirectory
	every.Namespace = NamespaceV2
	every.Metrics = "[::1]:9100"
	every.NSRefresh = 2*time.Minute + 10*time.Millisecond
	every.NSRefreshMax = 3*time.Minute + 20*time.Millisecond
	every.AllowOther = true
	every.ReadOnly = true
	every.AllowOther = false
	every.AllowRoot = true
	every.AutoUnmount = true
	every.UID, every.GID, every.Umask, every.FileMode, every.DirMode = 1001, 0, 0o22, 0o640, 0o1750
	every.NoExec, every.NoSuid, every.NoDev, every.NoAtime = true, false, true, true
	every.Intr = true
	every.S3ConnectTimeout = 3 * time.Second
	every.S3RequestTimeout = 45 * time.Second
	every.S3StallTimeout = 7 * time.Second
	every.S3RetryMaxTime = 30 * time.Second
	every.GC, every.GCInterval, every.GCFiles = false, 90*time.Second, 77
	every.GCKeep, every.GCKeepFor, every.GCGrace, every.GCMinAge, every.GCNSLag = 5, 36*time.Hour, 2*time.Hour, time.Minute, 3*time.Minute
	if err := every.Validate(); err != nil {
		t.Fatalf("test config invalid: %v", err)
	}
	configs := map[string]Config{
		"default": Default(), "mount 0": MountDefault(0), "mount 64G": MountDefault(64 << 30), "every option": every,
	}
	bases := []Config{Default(), MountDefault(1 << 30), every}
	for name, c := range configs {
		for i, base := range bases {
			got, err := Parse(base, c.Encode())
			if err != nil || got != c {
				t.Errorf("%s on base %d: Parse(Encode) = %v, %v\nwant %v", name, i, got, err, c)
			}
			got, err = Parse(base, c.EncodeChanged(base))
			if err != nil || got != c {
				t.Errorf("%s on base %d: Parse(EncodeChanged) = %v, %v\nwant %v", name, i, got, err, c)
			}
		}
		if c.String() != c.Encode() {
			t.Errorf("%s: String differs from Encode", name)
		}
	}
	if s := every.EncodeChanged(every); s != "" {
		t.Errorf("EncodeChanged of itself = %q, want empty", s)
	}
	if s := MountDefault(0).EncodeChanged(Default()); s != "data_block_size=64K,stream_segment_bytes=64M,data_cache_dirty_max_bytes_threshold=128M,segment_buffer_size=128M,memory_limit=256M" {
		t.Errorf("MountDefault(0) changes %q", s)
	}
}

func TestParseMount(t *testing.T) {
	const ram = 16 << 30 // budget 4G
	tests := []struct {
		name                      string
		opts                      string
		wantMem, wantDirty, wantS int64
	}{
		{"derived", "", 4 << 30, 2 << 30, 64 << 20},
		{"zero keeps it derived", "memory_limit=0", 0, 2 << 30, 64 << 20},
		{"dirty limits follow the chosen budget", "memory_limit=512M", 512 << 20, 256 << 20, 64 << 20},
		{"explicit limits win", "memory_limit=1G,data_cache_dirty_max_bytes_threshold=100M,segment_buffer_size=100M,stream_segment_bytes=32M",
			1 << 30, 100 << 20, 32 << 20},
		{"later budget wins", "memory_limit=512M,memory_limit=1G", 1 << 30, 512 << 20, 64 << 20},
		{"later zero derives again", "memory_limit=512M,memory_limit=0", 0, 2 << 30, 64 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseMount(ram, tt.opts)
			if err != nil {
				t.Fatalf("ParseMount(%q): %v", tt.opts, err)
			}
			if c.MemoryLimit != tt.wantMem || c.DirtyLimit() != tt.wantDirty || c.StreamSegmentBytes != tt.wantS {
				t.Fatalf("ParseMount(%q): memory %s, dirty %s, stream %s", tt.opts,
					FormatSize(c.MemoryLimit), FormatSize(c.DirtyLimit()), FormatSize(c.StreamSegmentBytes))
			}
		})
	}
	// Without ParseMount the same budget contradicts the derived limits.
	if _, err := Parse(MountDefault(ram), "memory_limit=512M"); !slices.Equal(problemNames(t, err), []string{"memory_limit"}) {
		t.Errorf("Parse over MountDefault: %v", err)
	}
	if _, err := ParseMount(ram, "memory_limit=lots"); !errors.Is(err, ErrSyntax) {
		t.Errorf("ParseMount bad budget: %v, want ErrSyntax", err)
	}
}

// TestOptionsCoverConfig checks that every Config field has exactly one option
// and that the documented defaults read back as Default.
func TestOptionsCoverConfig(t *testing.T) {
	fields := map[string]int{}
	rt := reflect.TypeFor[Config]()
	for i := range rt.NumField() {
		fields[rt.Field(i).Name] = 0
	}
	var fromDocs Config
	md := Markdown()
	for _, o := range Options() {
		if _, ok := fields[o.Field]; !ok {
			t.Errorf("option %s names field %q, which Config lacks", o.Name, o.Field)
		}
		fields[o.Field]++
		if o.Name == "" || o.Type == "" || o.Allowed == "" || o.Doc == "" {
			t.Errorf("option %+v is not fully documented", o)
		}
		if err := fromDocs.Set(o.Name, o.Default); err != nil {
			t.Errorf("documented default of %s does not read: %v", o.Name, err)
		}
		if !strings.Contains(md, "| `"+o.Name+"` |") && !strings.Contains(md, "| `"+o.Name+"` (also ") {
			t.Errorf("Markdown lacks %s", o.Name)
		}
	}
	for f, n := range fields {
		if n != 1 {
			t.Errorf("field %s has %d options, want 1", f, n)
		}
	}
	if fromDocs != Default() {
		t.Errorf("documented defaults give %v\nwant %v", fromDocs, Default())
	}
	if got, want := strings.Count(md, "\n| `"), len(Options()); got != want {
		t.Errorf("Markdown has %d option rows, want %d", got, want)
	}
}

func TestTotalRAM(t *testing.T) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		if got := TotalRAM(); got != 0 {
			t.Fatalf("TotalRAM() = %d without /proc/meminfo, want 0", got)
		}
		return
	}
	want, err := parseMemTotal(data)
	if err != nil {
		t.Fatalf("parseMemTotal of this machine: %v", err)
	}
	if limit, ok := cgroupLimit(os.DirFS("/")); ok && limit < want {
		want = limit
	}
	if got := TotalRAM(); got != want || got < 64<<20 {
		t.Fatalf("TotalRAM() = %d, want %d (and at least 64M)", got, want)
	}
}
