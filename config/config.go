// Package config owns every tunable of ckptfs: its name as a mount option, the
// Config field that holds it, its default, unit and allowed values, the parsing
// of sizes ("16M"), durations and booleans, the validation that reports every
// problem of a configuration at once, and the mapping from a mount-option
// string ("-o name=value,name,...") to a Config.
//
// # Two sets of defaults
//
// Default returns the engine's defaults, those of the stream-segment
// specification. With them nothing is sent ahead: a file's dirty limit (8 MiB,
// see Config.DirtyLimit) is below one 16 MiB multipart piece, so a partial
// segment is written before a piece's worth is unsent. MountDefault returns what
// `ckptfs mount` starts from: the dirty limits are raised from the machine's
// memory so that sending ahead works out of the box.
//
// Unlike pebble's Options there is no EnsureDefaults that fills zero fields:
// zero is a meaningful value of several options (stream_segment_bytes=0 sends
// nothing ahead, flush_interval=0 turns the periodic flush off, memory_limit=0
// derives the budget at mount, flush_on_close=false), so a zero field cannot
// mean "unset". Start from Default or MountDefault and change fields.
//
// # Errors
//
// Set parses one value and checks only its syntax; Validate checks ranges and
// the rules that tie options together, and reports every problem at once as an
// errors.Join of *OptionError. Parse does both. Each OptionError wraps one of
// ErrUnknownOption, ErrSyntax or ErrInvalidValue, so a caller can tell a typo in
// a name from a bad unit from a value out of range with errors.Is, and find the
// option with errors.As. A bad value is refused, never silently corrected.
package config

import (
	"fmt"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/s3"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// Config holds every tunable of a mount. Sizes are in bytes. Each field is set
// by the mount option named in its comment; Options lists them with their
// defaults and allowed values.
type Config struct {
	// DataBlockSize (data_block_size) is the bytes per data block, chosen when
	// a file is created and fixed for its life.
	DataBlockSize int64
	// MetaBlockSize (meta_block_size) is the bytes per block-map index node.
	MetaBlockSize int64
	// SegmentMaxObjectBytes (segment_max_object_bytes) is the largest object a
	// flush or sending ahead makes.
	SegmentMaxObjectBytes int64
	// SegmentMPUChunkSize (segment_mpu_chunk_size) is the size of one
	// multipart piece.
	SegmentMPUChunkSize int64
	// SegmentMPUMaxConcurrency (segment_mpu_max_concurrency) is how many
	// objects or pieces of one file are in flight at once.
	SegmentMPUMaxConcurrency int
	// MaxRequests (max_requests) is how many requests the whole mount has
	// in flight to the store at once, over every file; 0 is no cap beyond
	// the per-file one and the memory budget.
	MaxRequests int
	// StreamSegmentBytes (stream_segment_bytes) is the target size of the
	// objects data is sent ahead in; 0 sends nothing ahead. It is capped at
	// SegmentMaxObjectBytes: see EffectiveStreamSegmentBytes.
	StreamSegmentBytes int64
	// DataCacheDirtyMaxBytesThreshold (data_cache_dirty_max_bytes_threshold)
	// is one of the dirty-data limits of a file; see DirtyLimit.
	DataCacheDirtyMaxBytesThreshold int64
	// DataCacheDirtyMaxBlocksThreshold (data_cache_dirty_max_blocks_threshold)
	// is the same limit counted in blocks; see DirtyLimit.
	DataCacheDirtyMaxBlocksThreshold int64
	// SegmentBufferSize (segment_buffer_size) caps the dirty data of a file;
	// see DirtyLimit.
	SegmentBufferSize int64
	// ReadGetMaxBytes (read_get_max_bytes) is the largest ranged GET a read
	// makes.
	ReadGetMaxBytes int64
	// Format (format) is the block-pointer format of new files.
	Format segment.Format
	// WAL (wal) makes each acknowledged write durable before the
	// acknowledgement.
	WAL bool
	// WALLease (wal_lease) is how long a writer's lease on a file's
	// write-ahead log lasts unrenewed (it is renewed every third of it): how
	// long a writer on another machine that died keeps others out, and how
	// long a change waits for another mount's writer that is closing the file.
	WALLease time.Duration
	// FlushConflictPolicy (flush_conflict_policy) is what a flush does when
	// another writer replaced the file's head object.
	FlushConflictPolicy ConflictPolicy
	// FlushOnClose (flush_on_close) publishes a checkpoint when a written file
	// is closed.
	FlushOnClose bool
	// FlushInterval (flush_interval) is the period of the background flush;
	// 0 turns it off.
	FlushInterval time.Duration
	// Log (log) is the least severe level logged.
	Log LogLevel
	// MemoryLimit (memory_limit) is the one memory budget of a mount for all
	// dirty tiers and pieces in flight; 0 means derived at mount.
	MemoryLimit int64
	// EmulateLink (emulate_link) puts an emulated network link in front of
	// the store, for benchmarks.
	EmulateLink LinkProfile
	// Metrics (metrics) is the host:port of the Prometheus listener; empty
	// turns it off.
	Metrics string
	// NSRefresh (ns_refresh) is how often a mount re-reads the namespace log
	// written by other mounts while it is in use.
	NSRefresh time.Duration
	// NSRefreshMax (ns_refresh_max) is how far the interval between re-reads
	// grows, doubling after each that found nothing new, while no one uses
	// the mount: what an idle mount costs, and how late it may see another
	// mount's change. 0 means max(10s, ns_refresh): see RefreshMax.
	NSRefreshMax time.Duration
	// S3ConnectTimeout (s3_connect_timeout) bounds a TCP connect and a TLS
	// handshake to the S3 endpoint.
	S3ConnectTimeout time.Duration
	// S3RequestTimeout (s3_request_timeout) bounds the wait for the headers
	// of an S3 answer once the request, body included, is sent.
	S3RequestTimeout time.Duration
	// S3StallTimeout (s3_stall_timeout) fails an S3 request whose body, sent
	// or received, moves no byte for this long.
	S3StallTimeout time.Duration
	// S3RetryMaxTime (s3_retry_max_time) is how long a failed S3 request is
	// retried: no retry is begun once this much time has passed since the
	// first attempt.
	S3RetryMaxTime time.Duration
	// OpTimeout (op_timeout) bounds one filesystem call that waits for the
	// store (open, create, fsync, a rename, a read of data not in memory,
	// ...): its requests and their retries together. Past it the call
	// answers ETIMEDOUT; a change already sent may still land.
	OpTimeout time.Duration
	// AllowOther (allow_other) lets users other than the mounting one access
	// the mount.
	AllowOther bool
	// ReadOnly (ro) mounts read-only.
	ReadOnly bool
	// AllowRoot (allow_root) lets root, besides the mounting user, access
	// the mount; no other user. It excludes AllowOther.
	AllowRoot bool
	// AutoUnmount (auto_unmount) has fusermount3 unmount the volume when the
	// mount process ends, however it ends (kill -9 included).
	AutoUnmount bool
	// UID (uid) is the owner every file and directory shows and is checked
	// against; -1 (the default) shows each one's own.
	UID int64
	// GID (gid) is the group every file and directory shows; -1 shows each
	// one's own.
	GID int64
	// Umask (umask) is cleared from the permission bits every file and
	// directory shows.
	Umask int64
	// FileMode (file_mode) are the permission bits every file shows (before
	// Umask); -1 shows each file's own.
	FileMode int64
	// DirMode (dir_mode) are the permission bits every directory shows
	// (before Umask); -1 shows each directory's own.
	DirMode int64
	// NoExec (noexec) refuses to execute programs of the mount.
	NoExec bool
	// NoSuid (nosuid) ignores set-user-id and set-group-id bits; on by
	// default, as fusermount3 does for every user mount.
	NoSuid bool
	// NoDev (nodev) refuses to open device files; always on (Validate
	// refuses false): device nodes come from the bucket.
	NoDev bool
	// NoAtime (noatime) has the kernel not update access times.
	NoAtime bool
	// Intr (intr) lets any signal interrupt a request: the request's
	// context is canceled and what changed nothing yet fails with EINTR.
	// Off (the default), only a fatal signal does, as on a local disk.
	Intr bool
	// GC (gc) runs the cleaner in the background of a writable mount, on
	// the one mount that holds the volume's cleaner lease.
	GC bool
	// GCInterval (gc_interval) is the time between two passes of the
	// background cleaner (and between two tries to take its lease).
	GCInterval time.Duration
	// GCFiles (gc_files) bounds the files one pass cleans.
	GCFiles int
	// GCKeep (gc_keep) and GCKeepFor (gc_keep_for) are the retention
	// policy: the newest gc_keep checkpoints of each file (0: all), and
	// every one younger than gc_keep_for. A volume's policy
	// (ckptfs tune, <root>policy.json) overrides them.
	GCKeep    int
	GCKeepFor time.Duration
	// GCGrace (gc_grace), GCMinAge (gc_min_age) and GCNSLag (gc_ns_lag)
	// are the cleaner's --grace, --min-age and --ns-lag.
	GCGrace  time.Duration
	GCMinAge time.Duration
	GCNSLag  time.Duration
	// Namespace (namespace) is the namespace format of a new volume, written
	// into its descriptor by ckptfs format (or a mount with -o create); an
	// existing volume keeps the one it was made with.
	Namespace Namespace
}

// Unset is the value of UID, GID, FileMode and DirMode that shows each file's
// own owner, group or mode.
const Unset = -1

// Default returns the engine's defaults, those of the stream-segment
// specification. With them nothing is sent ahead (see the package doc).
func Default() Config {
	return Config{
		DataBlockSize:                    4 * kib,
		MetaBlockSize:                    4 * kib,
		SegmentMaxObjectBytes:            segment.MaxObjectBytes,
		SegmentMPUChunkSize:              16 * mib,
		SegmentMPUMaxConcurrency:         8,
		MaxRequests:                      0,
		StreamSegmentBytes:               1 * gib,
		DataCacheDirtyMaxBytesThreshold:  8 * mib,
		DataCacheDirtyMaxBlocksThreshold: 1024,
		SegmentBufferSize:                8 * mib,
		ReadGetMaxBytes:                  16 * mib,
		Format:                           segment.FormatStream,
		WAL:                              false,
		WALLease:                         30 * time.Second,
		FlushConflictPolicy:              ConflictRetry,
		FlushOnClose:                     true,
		FlushInterval:                    0,
		Log:                              LogWarn,
		MemoryLimit:                      0,
		EmulateLink:                      LinkNone,
		Metrics:                          "",
		NSRefresh:                        time.Second,
		NSRefreshMax:                     0,
		S3ConnectTimeout:                 s3.DefaultConnectTimeout,
		S3RequestTimeout:                 s3.DefaultRequestTimeout,
		S3StallTimeout:                   s3.DefaultStallTimeout,
		S3RetryMaxTime:                   s3.DefaultRetryMaxTime,
		OpTimeout:                        DefaultOpTimeout,
		AllowOther:                       false,
		ReadOnly:                         false,
		AllowRoot:                        false,
		AutoUnmount:                      false,
		UID:                              Unset,
		GID:                              Unset,
		Umask:                            0,
		FileMode:                         Unset,
		DirMode:                          Unset,
		NoExec:                           false,
		NoSuid:                           true,
		NoDev:                            true,
		NoAtime:                          false,
		Intr:                             false,
		GC:                               true,
		GCInterval:                       5 * time.Minute,
		GCFiles:                          1000,
		GCKeep:                           3,
		GCKeepFor:                        time.Hour,
		GCGrace:                          time.Hour,
		GCMinAge:                         10 * time.Minute,
		GCNSLag:                          11 * time.Minute,
		Namespace:                        NamespaceV1,
	}
}

// Bounds of the memory budget MountDefault derives from the machine's memory.
const (
	mountMemoryMin = 256 * mib
	mountMemoryMax = 8 * gib
)

// MountDefault returns what `ckptfs mount` starts from on a machine with
// DefaultOpTimeout is op_timeout's default: well under a minute, so that a
// program meets a store that stopped answering as an error it can act on,
// and longer than a healthy store's slowest single request takes.
const DefaultOpTimeout = 30 * time.Second

// totalRAM bytes of memory (0 when unknown: the smallest budget is used).
// It differs from Default so that sending ahead works out of the box.
func MountDefault(totalRAM uint64) Config {
	return mountDefaultFor(mountMemory(totalRAM))
}

// mountMemory is the budget MountDefault gives a mount: a quarter of the
// machine leaves room for the page cache and the programs writing; the clamp
// keeps a small machine able to hold a whole object and the pieces in flight,
// and a large one from pinning more than it can upload quickly. It is rounded
// down to whole MiB (of an even count) so that it and its half read well in
// logs.
func mountMemory(totalRAM uint64) int64 {
	mem := min(max(totalRAM/4, mountMemoryMin), mountMemoryMax)
	return int64(mem &^ (2*mib - 1))
}

// mountDefaultFor is MountDefault with a memory budget of mem bytes.
func mountDefaultFor(mem int64) Config {
	c := Default()
	c.MemoryLimit = mem
	// Half the budget as one file's dirty limit: an object filled in pieces
	// keeps its blocks in memory until it completes, so the limit must hold a
	// whole object (64M below) and more; the other half is for the pieces in
	// flight (segment_mpu_max_concurrency × segment_mpu_chunk_size = 128M).
	c.DataCacheDirtyMaxBytesThreshold = mem / 2
	c.SegmentBufferSize = mem / 2
	// Objects filled in 16M pieces and closed at 64M keep a checkpoint to few
	// objects, yet each completes often, so a flush waits for little.
	c.StreamSegmentBytes = 64 * mib
	// 64K blocks for throughput: 4K blocks cost about 16 times more map and
	// hash work per GiB written.
	c.DataBlockSize = 64 * kib
	return c
}

// RefreshMax is the effective ns_refresh_max: the option, or when it is 0
// (the default) 10s, or ns_refresh when that is longer, so that raising
// ns_refresh alone is never refused.
func (c Config) RefreshMax() time.Duration {
	if c.NSRefreshMax == 0 {
		return max(defaultRefreshMax, c.NSRefresh)
	}
	return c.NSRefreshMax
}

// defaultRefreshMax is the backoff bound of an idle mount's refresh when
// ns_refresh_max is not set.
const defaultRefreshMax = 10 * time.Second

// DirtyLimit is the most dirty data one file may hold, the specification's
//
//	min(max(data_cache_dirty_max_bytes_threshold,
//	        data_cache_dirty_max_blocks_threshold × data_block_size),
//	    segment_buffer_size)
//
// 8 MiB with Default. An object filled in pieces can be no larger: its blocks
// stay in memory until it completes.
func (c Config) DirtyLimit() int64 {
	return min(max(c.DataCacheDirtyMaxBytesThreshold, mulSat(c.DataCacheDirtyMaxBlocksThreshold, c.DataBlockSize)), c.SegmentBufferSize)
}

// EffectiveStreamSegmentBytes is the target size of objects sent ahead:
// min(StreamSegmentBytes, SegmentMaxObjectBytes). The specification caps the
// target at segment_max_object_bytes rather than refusing a larger one, so
// Validate accepts it and the engine is given this value.
func (c Config) EffectiveStreamSegmentBytes() int64 {
	return min(c.StreamSegmentBytes, c.SegmentMaxObjectBytes)
}

// S3Timeouts are the bounds of every request to an S3 store.
func (c Config) S3Timeouts() s3.Timeouts {
	return s3.Timeouts{Connect: c.S3ConnectTimeout, Request: c.S3RequestTimeout, Stall: c.S3StallTimeout, RetryMax: c.S3RetryMaxTime}
}

// mulSat multiplies non-negative a and b, saturating instead of overflowing,
// so that DirtyLimit of an unvalidated Config stays meaningful.
func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return a * b
	}
	if a > (1<<63-1)/b {
		return 1<<63 - 1
	}
	return a * b
}

// ConflictPolicy is what a flush does when the head object of its file was
// replaced by another writer since it was read.
type ConflictPolicy uint8

const (
	// ConflictRetry reloads the head and publishes again on top of it.
	ConflictRetry ConflictPolicy = iota + 1
	// ConflictFailFast fails the flush and leaves the data dirty.
	ConflictFailFast
)

func (p ConflictPolicy) String() string {
	switch p {
	case ConflictRetry:
		return "retry"
	case ConflictFailFast:
		return "failfast"
	}
	return fmt.Sprintf("conflict_policy(%d)", uint8(p))
}

// LogLevel is the least severe level a mount logs.
type LogLevel uint8

const (
	LogDebug LogLevel = iota + 1
	LogInfo
	LogWarn
	LogError
)

func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	}
	return fmt.Sprintf("log(%d)", uint8(l))
}

// ZapLevel is the zap level of l. An invalid level (which Validate refuses)
// maps to warn, the default.
func (l LogLevel) ZapLevel() zapcore.Level {
	switch l {
	case LogDebug:
		return zapcore.DebugLevel
	case LogInfo:
		return zapcore.InfoLevel
	case LogError:
		return zapcore.ErrorLevel
	}
	return zapcore.WarnLevel
}

// LinkProfile names an emulated network link put in front of the store. The
// latency and bandwidth of each profile belong to the staging package.
type LinkProfile uint8

const (
	// LinkNone talks to the store directly.
	LinkNone LinkProfile = iota + 1
	// LinkDirectory emulates the link to an S3 directory bucket.
	LinkDirectory
	// LinkGeneral emulates the link to an S3 general purpose bucket.
	LinkGeneral
)

func (p LinkProfile) String() string {
	switch p {
	case LinkNone:
		return "none"
	case LinkDirectory:
		return "directory"
	case LinkGeneral:
		return "general"
	}
	return fmt.Sprintf("link(%d)", uint8(p))
}

// Namespace is the namespace format of a volume (docs/namespace-v2.md),
// chosen when the volume is made and kept in its descriptor (fs/volume).
type Namespace uint8

const (
	// NamespaceV1 is one ordered log of changes per volume (fs/namespace).
	NamespaceV1 Namespace = iota + 1
	// NamespaceV2 makes each name an object (fs/nsv2); experimental.
	NamespaceV2
)

func (n Namespace) String() string {
	switch n {
	case NamespaceV1:
		return "v1"
	case NamespaceV2:
		return "v2"
	}
	return fmt.Sprintf("namespace(%d)", uint8(n))
}
