package config

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// Limits that Validate enforces, with the reason for each.
const (
	minBlockSize     = 512      // one disk sector: smaller blocks only multiply map work
	maxDataBlockSize = 1 * mib  // larger blocks make small writes rewrite too much
	maxMetaBlockSize = 64 * kib // index nodes are read one walk at a time
	minObjectBytes   = 1 * mib  // an object must hold a leaf and its data with room to spare
	// maxObjectBytes: a block pointer addresses at most 1 GiB inside one object.
	maxObjectBytes = segment.MaxObjectBytes
	// minChunkSize: S3 refuses parts below 5 MiB but the last.
	minChunkSize   = staging.MinPartSize
	maxConcurrency = 64
	// maxRequests: more connections to one endpoint than this is a typo
	// rather than a tuning (S3 serves thousands of requests a second per
	// prefix, not per connection).
	maxRequests      = 4096
	maxDirtyBlocks   = 1 << 32 // keeps blocks × block size far from overflow
	minFlushInterval = 100 * time.Millisecond
	// A lease is renewed every third of it: below a second a slow request
	// loses it; above minutes a dead writer keeps others out too long.
	minWALLease         = 3 * time.Second
	maxWALLease         = 10 * time.Minute
	minNamespaceRefresh = 10 * time.Millisecond
	// The backoff of an idle mount's refresh stops here: beyond minutes a
	// mount would show other mounts' changes too late to be of use.
	maxNamespaceRefresh   = 10 * time.Minute
	maxGCFiles            = 1000000
	maxPort               = 65535
	maxID                 = 1<<32 - 1
	dirtyLimitDescription = "min(max(data_cache_dirty_max_bytes_threshold, data_cache_dirty_max_blocks_threshold × data_block_size), segment_buffer_size)"
)

// Validate checks every rule of every option and of options taken together,
// and returns all problems at once: an errors.Join of *OptionError, each
// wrapping ErrInvalidValue, or nil.
func (c Config) Validate() error {
	v := validator{c: &c}

	v.check("data_block_size", isPowerOfTwo(c.DataBlockSize) && c.DataBlockSize >= minBlockSize && c.DataBlockSize <= maxDataBlockSize,
		"must be a power of two from 512 to 1M")
	v.check("meta_block_size", isPowerOfTwo(c.MetaBlockSize) && c.MetaBlockSize >= minBlockSize && c.MetaBlockSize <= maxMetaBlockSize,
		"must be a power of two from 512 to 64K")

	switch {
	case c.SegmentMaxObjectBytes < minObjectBytes:
		v.fail("segment_max_object_bytes", "must be at least 1M")
	case c.SegmentMaxObjectBytes > maxObjectBytes:
		v.fail("segment_max_object_bytes", "must be at most 1G (the most a block pointer addresses in one object)")
	}

	v.check("segment_mpu_chunk_size", c.SegmentMPUChunkSize >= minChunkSize,
		"must be at least 5M (S3's minimum part size)")
	v.check("segment_mpu_chunk_size", c.SegmentMPUChunkSize <= c.SegmentMaxObjectBytes,
		"must be at most segment_max_object_bytes="+FormatSize(c.SegmentMaxObjectBytes))

	v.check("segment_mpu_max_concurrency", c.SegmentMPUMaxConcurrency >= 1 && c.SegmentMPUMaxConcurrency <= maxConcurrency,
		"must be from 1 to 64")
	v.check("max_requests", c.MaxRequests >= 0 && c.MaxRequests <= maxRequests,
		"must be 0 (no cap) or from 1 to 4096")

	// A target above segment_max_object_bytes is not an error: the
	// specification caps it there (EffectiveStreamSegmentBytes).
	v.check("stream_segment_bytes", c.StreamSegmentBytes >= 0, "must not be negative (0 sends nothing ahead)")

	v.check("data_cache_dirty_max_bytes_threshold", c.DataCacheDirtyMaxBytesThreshold >= 0, "must not be negative")
	v.check("data_cache_dirty_max_blocks_threshold", c.DataCacheDirtyMaxBlocksThreshold >= 1 && c.DataCacheDirtyMaxBlocksThreshold <= maxDirtyBlocks,
		"must be from 1 to 4294967296")
	// With at least one block in the blocks threshold and in the buffer, the
	// dirty limit holds at least one block, so a write can always proceed.
	v.check("segment_buffer_size", c.SegmentBufferSize >= c.DataBlockSize,
		"must be at least data_block_size="+FormatSize(c.DataBlockSize))

	v.check("read_get_max_bytes", c.ReadGetMaxBytes >= c.DataBlockSize,
		"must be at least data_block_size="+FormatSize(c.DataBlockSize))
	v.check("read_get_max_bytes", c.ReadGetMaxBytes <= maxObjectBytes,
		"must be at most 1G (one GET reads inside one object)")

	v.check("format", c.Format == segment.FormatStream || c.Format == segment.FormatParted,
		"must be stream or parted")
	v.check("flush_conflict_policy", c.FlushConflictPolicy == ConflictRetry || c.FlushConflictPolicy == ConflictFailFast,
		"must be retry or failfast")
	v.check("flush_interval", c.FlushInterval == 0 || c.FlushInterval >= minFlushInterval,
		"must be 0 (off) or at least 100ms")
	v.check("wal_lease", c.WALLease >= minWALLease && c.WALLease <= maxWALLease,
		"must be from 3s to 10m")
	v.check("log", c.Log >= LogDebug && c.Log <= LogError,
		"must be debug, info, warn or error")
	v.check("nodev", c.NoDev, "must be true: "+devRefused)

	switch {
	case c.MemoryLimit < 0:
		v.fail("memory_limit", "must not be negative (0 derives it at mount)")
	case c.MemoryLimit > 0 && c.MemoryLimit < c.SegmentMPUChunkSize:
		// The budget must hold at least one piece in flight.
		v.fail("memory_limit", "must be 0 (derived at mount) or at least segment_mpu_chunk_size="+
			FormatSize(c.SegmentMPUChunkSize))
	case c.MemoryLimit > 0 && c.MemoryLimit < c.DirtyLimit():
		// One file must be able to reach its dirty limit inside the budget.
		v.fail("memory_limit", "must be 0 (derived at mount) or at least the dirty limit "+
			FormatSize(c.DirtyLimit())+" = "+dirtyLimitDescription)
	}

	v.check("emulate_link", c.EmulateLink >= LinkNone && c.EmulateLink <= LinkGeneral,
		"must be none, directory or general")
	v.check("namespace", c.Namespace == NamespaceV1 || c.Namespace == NamespaceV2,
		"must be v1 or v2")

	if c.Metrics != "" {
		if err := checkAddr(c.Metrics); err != nil {
			v.fail("metrics", err.Error())
		}
	}

	v.check("gc_interval", c.GCInterval >= time.Second && c.GCInterval <= 24*time.Hour, "must be from 1s to 24h")
	v.check("gc_files", c.GCFiles >= 1 && c.GCFiles <= maxGCFiles, "must be from 1 to 1000000")
	v.check("gc_keep", c.GCKeep >= 0 && c.GCKeep <= maxGCFiles, "must be from 0 (all) to 1000000")
	v.check("gc_keep_for", c.GCKeepFor >= 0, "must not be negative")
	// The grace must exceed the time of one request (a flush's part 0
	// before its head): below a second it is a typo.
	v.check("gc_grace", c.GCGrace >= time.Second, "must be at least 1s")
	v.check("gc_min_age", c.GCMinAge >= 0, "must not be negative")
	v.check("gc_ns_lag", c.GCNSLag >= 0, "must not be negative")

	v.check("ns_refresh", c.NSRefresh >= minNamespaceRefresh, "must be at least 10ms")
	switch {
	case c.NSRefreshMax != 0 && c.NSRefreshMax < c.NSRefresh:
		v.fail("ns_refresh_max", "must be at least ns_refresh="+c.NSRefresh.String()+
			" (the interval only grows from ns_refresh): raise ns_refresh_max with ns_refresh")
	case c.NSRefreshMax > maxNamespaceRefresh:
		v.fail("ns_refresh_max", "must be at most 10m")
	}

	// Below a second a busy but healthy store fails requests; the upper
	// bounds only catch a unit mistaken (a connect takes seconds, not hours).
	v.check("s3_connect_timeout", c.S3ConnectTimeout >= time.Second && c.S3ConnectTimeout <= 10*time.Minute,
		"must be from 1s to 10m")
	v.check("s3_request_timeout", c.S3RequestTimeout >= time.Second && c.S3RequestTimeout <= time.Hour,
		"must be from 1s to 1h")
	v.check("s3_stall_timeout", c.S3StallTimeout >= time.Second && c.S3StallTimeout <= time.Hour,
		"must be from 1s to 1h")
	v.check("s3_retry_max_time", c.S3RetryMaxTime >= time.Second && c.S3RetryMaxTime <= time.Hour,
		"must be from 1s to 1h")
	v.check("op_timeout", c.OpTimeout >= time.Second && c.OpTimeout <= time.Hour,
		"must be from 1s to 1h")

	v.check("allow_root", !(c.AllowRoot && c.AllowOther), "excludes allow_other (allow_root lets root alone in besides the mounting user)")
	for _, id := range []struct {
		name string
		v    int64
	}{{"uid", c.UID}, {"gid", c.GID}} {
		// 4294967295 is (uid_t)-1, "no change" to chown(2): no one's id.
		v.check(id.name, id.v == Unset || (id.v >= 0 && id.v < maxID), "must be empty or from 0 to 4294967294")
	}
	v.check("umask", c.Umask >= 0 && c.Umask <= 0o777, "must be from 0 to 0777")
	// Set-user-id and set-group-id bits are not given by an option: a mode
	// shown for every file must not make every program set-user-id.
	v.check("file_mode", c.FileMode == Unset || (c.FileMode >= 0 && c.FileMode <= 0o777), "must be empty or from 0 to 0777")
	v.check("dir_mode", c.DirMode == Unset || (c.DirMode >= 0 && c.DirMode <= 0o1777), "must be empty or from 0 to 01777 (the sticky bit allowed)")

	return errors.Join(v.errs...)
}

// checkAddr checks a listener address: host:port with a decimal port, and
// nothing that would not survive a mount-option string.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalidf("want host:port: %v", err)
	}
	if strings.ContainsAny(host, ", \t\n") {
		return invalidf("want host:port: host %q has a comma or a space", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > maxPort {
		return invalidf("want host:port: port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// validator collects the problems of one Validate.
type validator struct {
	c    *Config
	errs []error
}

// check records msg against the option name unless ok.
func (v *validator) check(name string, ok bool, msg string) {
	if !ok {
		v.fail(name, msg)
	}
}

func (v *validator) fail(name, msg string) {
	o := lookup(name)
	v.errs = append(v.errs, &OptionError{
		Name: name, Value: o.get(v.c), Allowed: o.allowed,
		Err: &problem{class: ErrInvalidValue, msg: msg},
	})
}
