package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/segment"
)

// kind is the type of an option's value.
type kind uint8

const (
	kindSize kind = iota + 1
	kindInt
	kindBool
	kindDuration
	kindEnum
	kindAddr
	kindID
	kindMode
)

func (k kind) String() string {
	switch k {
	case kindSize:
		return "size"
	case kindInt:
		return "integer"
	case kindBool:
		return "boolean"
	case kindDuration:
		return "duration"
	case kindEnum:
		return "enum"
	case kindAddr:
		return "host:port"
	case kindID:
		return "id"
	case kindMode:
		return "octal mode"
	}
	return "?"
}

// option describes one tunable: how it reads and writes its field, and its
// documentation. Validate holds the rules; set checks only syntax.
type option struct {
	name    string
	field   string // Config field
	kind    kind
	allowed string
	mount   string // what MountDefault sets, when it differs from Default
	doc     string
	get     func(*Config) string
	set     func(*Config, string) error
}

func sizeOpt(name, field, allowed, mount, doc string, p func(*Config) *int64) option {
	return option{name: name, field: field, kind: kindSize, allowed: allowed, mount: mount, doc: doc,
		get: func(c *Config) string { return FormatSize(*p(c)) },
		set: func(c *Config, s string) error {
			n, err := ParseSize(s)
			if err == nil {
				*p(c) = n
			}
			return err
		},
	}
}

// intOpt is a plain decimal count, stored in an int or int64 field.
func intOpt[T int | int64](name, field, allowed, doc string, p func(*Config) *T) option {
	return option{name: name, field: field, kind: kindInt, allowed: allowed, doc: doc,
		get: func(c *Config) string { return fmt.Sprint(*p(c)) },
		set: func(c *Config, s string) error {
			n, err := parseInt(s)
			if err != nil {
				return err
			}
			if int64(T(n)) != n {
				return syntaxf("bad integer %q: too large", s)
			}
			*p(c) = T(n)
			return nil
		},
	}
}

func boolOpt(name, field, doc string, p func(*Config) *bool) option {
	return option{name: name, field: field, kind: kindBool, allowed: "true or false (bare name: true)", doc: doc,
		get: func(c *Config) string { return formatBool(*p(c)) },
		set: func(c *Config, s string) error {
			b, err := parseBool(s)
			if err == nil {
				*p(c) = b
			}
			return err
		},
	}
}

func durationOpt(name, field, allowed, doc string, p func(*Config) *time.Duration) option {
	return option{name: name, field: field, kind: kindDuration, allowed: allowed, doc: doc,
		get: func(c *Config) string { return p(c).String() },
		set: func(c *Config, s string) error {
			d, err := ParseDuration(s)
			if err == nil {
				*p(c) = d
			}
			return err
		},
	}
}

// idOpt is a user or group id; empty (Unset) shows each file's own.
func idOpt(name, field, doc string, p func(*Config) *int64) option {
	return option{name: name, field: field, kind: kindID, allowed: "empty (each file's own) or 0 to 4294967294", doc: doc,
		get: func(c *Config) string {
			if *p(c) == Unset {
				return ""
			}
			return strconv.FormatInt(*p(c), 10)
		},
		set: func(c *Config, s string) error {
			if s == "" {
				*p(c) = Unset
				return nil
			}
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return syntaxf("bad id %q: want decimal digits", s)
			}
			*p(c) = int64(n)
			return nil
		},
	}
}

// modeOpt is a set of permission bits in octal, as chmod(1) and mount(8)
// write them ("0644" or "644"); when unset is true, empty means Unset.
func modeOpt(name, field, allowed, doc string, unset bool, p func(*Config) *int64) option {
	return option{name: name, field: field, kind: kindMode, allowed: allowed, doc: doc,
		get: func(c *Config) string {
			if *p(c) == Unset {
				return ""
			}
			return fmt.Sprintf("%04o", *p(c))
		},
		set: func(c *Config, s string) error {
			if s == "" && unset {
				*p(c) = Unset
				return nil
			}
			n, err := strconv.ParseUint(s, 8, 32)
			if err != nil {
				return syntaxf("bad mode %q: want octal digits such as 0644", s)
			}
			*p(c) = int64(n)
			return nil
		},
	}
}

// enumOpt is an option whose value is one of a few words; T's String gives
// each value's word.
func enumOpt[T interface {
	comparable
	fmt.Stringer
}](name, field, doc string, values []T, p func(*Config) *T) option {
	words := make([]string, len(values))
	for i, v := range values {
		words[i] = v.String()
	}
	allowed := orList(words)
	return option{name: name, field: field, kind: kindEnum, allowed: allowed, doc: doc,
		get: func(c *Config) string { return (*p(c)).String() },
		set: func(c *Config, s string) error {
			for _, v := range values {
				if strings.EqualFold(s, v.String()) {
					*p(c) = v
					return nil
				}
			}
			return syntaxf("bad value %q: want %s", s, allowed)
		},
	}
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// options is every tunable, in the order of Options and Encode. It is a
// constant table: nothing changes it after initialisation.
var options = []option{
	sizeOpt("data_block_size", "DataBlockSize", "a power of two from 512 to 1M", "64K",
		"bytes per data block, chosen when a file is created",
		func(c *Config) *int64 { return &c.DataBlockSize }),
	sizeOpt("meta_block_size", "MetaBlockSize", "a power of two from 512 to 64K", "",
		"bytes per block-map index node",
		func(c *Config) *int64 { return &c.MetaBlockSize }),
	sizeOpt("segment_max_object_bytes", "SegmentMaxObjectBytes", "1M to 1G", "",
		"the largest object a flush or sending ahead makes",
		func(c *Config) *int64 { return &c.SegmentMaxObjectBytes }),
	sizeOpt("segment_mpu_chunk_size", "SegmentMPUChunkSize", "5M to segment_max_object_bytes", "",
		"size of one multipart piece",
		func(c *Config) *int64 { return &c.SegmentMPUChunkSize }),
	intOpt("segment_mpu_max_concurrency", "SegmentMPUMaxConcurrency", "1 to 64",
		"objects or pieces of one file in flight at once",
		func(c *Config) *int { return &c.SegmentMPUMaxConcurrency }),
	intOpt("max_requests", "MaxRequests", "0 (no cap) or 1 to 4096",
		"requests to the store in flight at once over the whole mount, every file's together (segment_mpu_max_concurrency is one file's); a request beyond it waits for one to end",
		func(c *Config) *int { return &c.MaxRequests }),
	sizeOpt("stream_segment_bytes", "StreamSegmentBytes", "0 (nothing sent ahead) or more", "64M",
		"target size of the objects data is sent ahead in while it is written; capped at segment_max_object_bytes: the target is min(stream_segment_bytes, segment_max_object_bytes)",
		func(c *Config) *int64 { return &c.StreamSegmentBytes }),
	sizeOpt("data_cache_dirty_max_bytes_threshold", "DataCacheDirtyMaxBytesThreshold", "0 or more", "memory_limit/2",
		"dirty bytes a file may hold (see the dirty limit below)",
		func(c *Config) *int64 { return &c.DataCacheDirtyMaxBytesThreshold }),
	intOpt("data_cache_dirty_max_blocks_threshold", "DataCacheDirtyMaxBlocksThreshold", "1 to 4294967296",
		"dirty blocks a file may hold (see the dirty limit below)",
		func(c *Config) *int64 { return &c.DataCacheDirtyMaxBlocksThreshold }),
	sizeOpt("segment_buffer_size", "SegmentBufferSize", "data_block_size or more", "memory_limit/2",
		"caps the dirty data of a file (see the dirty limit below)",
		func(c *Config) *int64 { return &c.SegmentBufferSize }),
	sizeOpt("read_get_max_bytes", "ReadGetMaxBytes", "data_block_size to 1G", "",
		"the largest ranged GET a read makes",
		func(c *Config) *int64 { return &c.ReadGetMaxBytes }),
	enumOpt("format", "Format", "block-pointer format of new files",
		[]segment.Format{segment.FormatStream, segment.FormatParted},
		func(c *Config) *segment.Format { return &c.Format }),
	boolOpt("wal", "WAL", "a write-ahead log: each write is durable when it returns, fsync/close publish in the background, one writer per file (another mount gets EBUSY), nothing sent ahead",
		func(c *Config) *bool { return &c.WAL }),
	durationOpt("wal_lease", "WALLease", "from 3s to 10m",
		"how long a writer's lease on a file's write-ahead log lasts unrenewed (renewed every third of it): how long a writer on another machine that died keeps others out, and how long a change waits for another mount's writer that is closing the file (its last publish in flight)",
		func(c *Config) *time.Duration { return &c.WALLease }),
	enumOpt("flush_conflict_policy", "FlushConflictPolicy", "what a flush does when another writer replaced the file's head",
		[]ConflictPolicy{ConflictRetry, ConflictFailFast},
		func(c *Config) *ConflictPolicy { return &c.FlushConflictPolicy }),
	boolOpt("flush_on_close", "FlushOnClose", "publish a checkpoint when a written file is closed",
		func(c *Config) *bool { return &c.FlushOnClose }),
	durationOpt("flush_interval", "FlushInterval", "0 (off) or 100ms or more",
		"period of the background flush of written files",
		func(c *Config) *time.Duration { return &c.FlushInterval }),
	enumOpt("log", "Log", "least severe level logged",
		[]LogLevel{LogDebug, LogInfo, LogWarn, LogError},
		func(c *Config) *LogLevel { return &c.Log }),
	sizeOpt("memory_limit", "MemoryLimit", "0 (derived at mount), or at least segment_mpu_chunk_size and the dirty limit", "RAM/4, from "+FormatSize(mountMemoryMin)+" to "+FormatSize(mountMemoryMax),
		"the one memory budget of a mount for all dirty data and pieces in flight; RAM is the lower of MemTotal and the cgroup's memory limit",
		func(c *Config) *int64 { return &c.MemoryLimit }),
	enumOpt("emulate_link", "EmulateLink", "emulate a network link in front of the store (benchmarks)",
		[]LinkProfile{LinkNone, LinkDirectory, LinkGeneral},
		func(c *Config) *LinkProfile { return &c.EmulateLink }),
	{name: "metrics", field: "Metrics", kind: kindAddr, allowed: "empty (off) or host:port",
		doc: "address of the Prometheus listener (unauthenticated); an empty host, as in :9567, is every interface: use 127.0.0.1:port to keep it local",
		get: func(c *Config) string { return c.Metrics },
		set: func(c *Config, s string) error { c.Metrics = s; return nil }},
	durationOpt("ns_refresh", "NSRefresh", "10ms or more",
		"how often a mount in use (a lookup, listing or open since the last re-read, a change of its own or one found) re-reads the namespace log of other mounts",
		func(c *Config) *time.Duration { return &c.NSRefresh }),
	durationOpt("ns_refresh_max", "NSRefreshMax", "0 (10s, or ns_refresh if longer), or from ns_refresh to 10m",
		"the longest interval between re-reads of the namespace log: it doubles after each re-read that found nothing new while the mount is not used, up to this, and returns to ns_refresh at its first use; an idle mount then costs at most 86400/ns_refresh_max small GETs a day, and sees another mount's change within ns_refresh_max (within ns_refresh while used), plus the kernel's one-second caches",
		func(c *Config) *time.Duration { return &c.NSRefreshMax }),
	durationOpt("s3_connect_timeout", "S3ConnectTimeout", "from 1s to 10m",
		"bounds a TCP connect and a TLS handshake to the S3 endpoint",
		func(c *Config) *time.Duration { return &c.S3ConnectTimeout }),
	durationOpt("s3_request_timeout", "S3RequestTimeout", "from 1s to 1h",
		"bounds the wait for an S3 answer's headers once the request is sent",
		func(c *Config) *time.Duration { return &c.S3RequestTimeout }),
	durationOpt("s3_stall_timeout", "S3StallTimeout", "from 1s to 1h",
		"fails an S3 request whose body (sent or received) moves no byte for this long; a slow transfer that moves passes",
		func(c *Config) *time.Duration { return &c.S3StallTimeout }),
	durationOpt("s3_retry_max_time", "S3RetryMaxTime", "from 1s to 1h",
		"how long a failed S3 request is retried (jittered exponential backoff, at most 20s between attempts): no retry is begun once this much time has passed since the first attempt",
		func(c *Config) *time.Duration { return &c.S3RetryMaxTime }),
	durationOpt("op_timeout", "OpTimeout", "from 1s to 1h",
		"bounds one filesystem call that waits for the store (open, create, fsync, rename, a read of data not in memory, ...), all its requests and retries together: past it the call answers ETIMEDOUT (a change already sent may still land, and is logged); a stat answers from what the mount last saw instead once the store has not answered for a few seconds",
		func(c *Config) *time.Duration { return &c.OpTimeout }),
	boolOpt("allow_other", "AllowOther", "let users other than the mounting one access the mount",
		func(c *Config) *bool { return &c.AllowOther }),
	boolOpt("ro", "ReadOnly", "mount read-only (rw: not)",
		func(c *Config) *bool { return &c.ReadOnly }),
	boolOpt("allow_root", "AllowRoot", "let root access the mount besides the mounting user, and no one else (not with allow_other); refused in the filesystem, as libfuse does",
		func(c *Config) *bool { return &c.AllowRoot }),
	boolOpt("auto_unmount", "AutoUnmount", "unmount when the mount process ends, even when killed (kill -9): fusermount3 (or fusermount) holds the mount and unmounts it when the process is gone; without it a killed mount leaves 'Transport endpoint is not connected' until fusermount3 -u (or fusermount -u)",
		func(c *Config) *bool { return &c.AutoUnmount }),
	idOpt("uid", "UID", "the owner every file and directory shows, and that the kernel checks permissions against; files are still created as the caller, and chown still records an owner, shown by mounts without uid",
		func(c *Config) *int64 { return &c.UID }),
	idOpt("gid", "GID", "the group every file and directory shows and is checked against, as uid",
		func(c *Config) *int64 { return &c.GID }),
	modeOpt("umask", "Umask", "0 to 0777", "permission bits cleared from what every file and directory shows (after file_mode and dir_mode) and is checked against; chmod still records the mode",
		false, func(c *Config) *int64 { return &c.Umask }),
	modeOpt("file_mode", "FileMode", "empty (each file's own) or 0 to 0777", "the permission bits every file shows and is checked against, in place of its own (umask still applies)",
		true, func(c *Config) *int64 { return &c.FileMode }),
	modeOpt("dir_mode", "DirMode", "empty (each directory's own) or 0 to 01777", "the permission bits every directory shows and is checked against, in place of its own (umask still applies)",
		true, func(c *Config) *int64 { return &c.DirMode }),
	boolOpt("noexec", "NoExec", "the kernel refuses to execute programs of the mount (exec: not)",
		func(c *Config) *bool { return &c.NoExec }),
	boolOpt("nosuid", "NoSuid", "the kernel ignores set-user-id and set-group-id bits (suid: not, root only)",
		func(c *Config) *bool { return &c.NoSuid }),
	boolOpt("nodev", "NoDev", "the kernel refuses to open device files of the mount (EACCES); always on: a device node comes from the bucket, which is not trusted, so dev and nodev=false are refused",
		func(c *Config) *bool { return &c.NoDev }),
	boolOpt("noatime", "NoAtime", "the kernel does not update access times (atime, relatime, strictatime: the kernel's default, relatime)",
		func(c *Config) *bool { return &c.NoAtime }),
	boolOpt("intr", "Intr", "any signal interrupts a request to the store, which then fails with EINTR if it changed nothing yet (nointr, the default: only a fatal signal does, as on a local disk; a non-fatal one lets the call finish and report its real result)",
		func(c *Config) *bool { return &c.Intr }),
	boolOpt("gc", "GC", "run the cleaner in the background of a writable mount (one mount of a volume at a time: the one holding its lease, gc/lease); gc=off leaves the cleaning to ckptfs gc or ckptfs-gc@.timer",
		func(c *Config) *bool { return &c.GC }),
	durationOpt("gc_interval", "GCInterval", "from 1s to 24h",
		"time between two passes of the background cleaner; a pass cleans at most gc_files files from where the last ended (each costs a few GETs: its listing, head and checkpoints' headers), and df counts each file as of the last pass over it",
		func(c *Config) *time.Duration { return &c.GCInterval }),
	intOpt("gc_files", "GCFiles", "1 to 1000000",
		"files one pass of the background cleaner cleans",
		func(c *Config) *int { return &c.GCFiles }),
	intOpt("gc_keep", "GCKeep", "0 (all) to 1000000",
		"the background cleaner keeps the newest gc_keep checkpoints of each file (ckptfs gc --keep); a volume's policy (ckptfs tune) overrides it",
		func(c *Config) *int { return &c.GCKeep }),
	durationOpt("gc_keep_for", "GCKeepFor", "0 or more",
		"the background cleaner also keeps every checkpoint younger than this (ckptfs gc --keep-for); a volume's policy (ckptfs tune) overrides it",
		func(c *Config) *time.Duration { return &c.GCKeepFor }),
	durationOpt("gc_grace", "GCGrace", "1s or more",
		"the background cleaner's ckptfs gc --grace: the age before work no live writer covers counts as abandoned",
		func(c *Config) *time.Duration { return &c.GCGrace }),
	durationOpt("gc_min_age", "GCMinAge", "0 or more",
		"the background cleaner's ckptfs gc --min-age: how long an object must have been unreferenced before it is deleted",
		func(c *Config) *time.Duration { return &c.GCMinAge }),
	durationOpt("gc_ns_lag", "GCNSLag", "0 or more",
		"the background cleaner's ckptfs gc --ns-lag: how long a file must have had no name before it is deleted; it must cover the ns_refresh_max of every mount of the volume",
		func(c *Config) *time.Duration { return &c.GCNSLag }),
	enumOpt("namespace", "Namespace", "the namespace format of a new volume, chosen by ckptfs format (or a mount with create) and kept in its descriptor; an existing volume keeps its own. v2 (experimental, docs/namespace-v2.md) makes each name an object, so that mounts creating different names never contend; every change of names works (rename, directories moved across directories, link, rmdir), and so do the cleaner and fsck; the root's attributes cannot be changed yet, and ckptfs upgrade converts a v1 volume",
		[]Namespace{NamespaceV1, NamespaceV2},
		func(c *Config) *Namespace { return &c.Namespace }),
}

// optionAliases are the names other S3 filesystems (s3fs, mountpoint-s3,
// goofys, rclone) give a tunable, each read as the tunable it maps to: the
// engine's names stay the ones logs and Encode write.
var optionAliases = map[string]string{
	"part_size": "segment_mpu_chunk_size",
	// mountpoint-s3's --max-threads bounds the whole mount; goofys's and
	// rclone's concurrency is per transfer, one file's.
	"max_threads":     "max_requests",
	"max_concurrency": "segment_mpu_max_concurrency",
}

// aliasesOf is the aliases of the tunable name, sorted.
func aliasesOf(name string) []string {
	var out []string
	for a, n := range optionAliases {
		if n == name {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// lookup finds an option by its name or an alias of it.
func lookup(name string) *option {
	if n, ok := optionAliases[name]; ok {
		name = n
	}
	for i := range options {
		if options[i].name == name {
			return &options[i]
		}
	}
	return nil
}

func names() []string {
	out := make([]string, len(options))
	for i, o := range options {
		out[i] = o.name
	}
	return out
}

// genericMountFlags are handled by mount(8) or by the command (create,
// single_writer: it reads them from the option list itself); fstab lines
// carry them, so Parse accepts and ignores them.
var genericMountFlags = map[string]bool{
	"auto": true, "noauto": true, "user": true, "nouser": true, "users": true,
	"_netdev": true, "nofail": true, "defaults": true,
	"create": true, "single_writer": true,
}

// mountFlagAliases are mount(8)'s words for turning an option off: Parse reads
// "exec" as noexec=false, and "nointr" (NFS's word) as intr=false. relatime and strictatime turn noatime off: FUSE
// mounts get the kernel's default, relatime.
var mountFlagAliases = map[string]string{
	"rw": "ro", "exec": "noexec", "suid": "nosuid",
	"atime": "noatime", "relatime": "noatime", "strictatime": "noatime",
	"nointr": "intr",
}

// unsupportedFlags are options of other FUSE filesystems that ckptfs refuses,
// with the reason.
var unsupportedFlags = map[string]string{
	"nonempty": "not supported: FUSE 3 dropped it, and ckptfs refuses a non-empty mount point (files under it would be hidden): mount on an empty directory",
	"dev":      "not supported: " + devRefused,
}

// devRefused is why dev (nodev=false) is refused: a device node's number is
// whatever was stored in the bucket.
const devRefused = "a ckptfs mount is always nodev: device nodes are stored in the bucket, and whoever may write to it could otherwise make one that opens any device of this machine"

// isGenericMountFlag reports whether item is a flag Parse ignores: one of
// genericMountFlags, or an "x-" option, which mount(8) defines as a comment
// for userspace tools (x-systemd.automount).
func isGenericMountFlag(item string) bool {
	return genericMountFlags[item] || strings.HasPrefix(item, "x-")
}

// Set sets one option by its mount-option name. It checks only the value's
// syntax; Validate checks ranges and the rules that tie options together. An
// unknown name or a bad value is an *OptionError.
func (c *Config) Set(name, value string) error {
	o := lookup(name)
	if o == nil {
		return unknownOption(name, value)
	}
	if err := o.set(c, value); err != nil {
		return &OptionError{Name: name, Value: value, Allowed: o.allowed, Err: err}
	}
	return nil
}

// Get returns the value of one option as option text, as Encode writes it.
func (c Config) Get(name string) (string, error) {
	o := lookup(name)
	if o == nil {
		return "", unknownOption(name, "")
	}
	return o.get(&c), nil
}

// Parse applies a mount-option string on top of base and validates the
// result. opts is "name=value,name,..." (several -o strings joined by commas
// read the same; empty items are ignored). A bare name sets a boolean option
// to true. Later items win over earlier ones. Generic mount flags (rw, nodev,
// _netdev, nofail, defaults, x-..., and the like) are accepted and ignored;
// rw, exec, suid, atime and relatime turn ro, noexec, nosuid and noatime
// off, and nonempty and dev are refused with the reason.
//
// Every problem is reported at once, as an errors.Join of *OptionError; on
// error Parse returns base unchanged.
func Parse(base Config, opts string) (Config, error) {
	c := base
	var errs []error
	for item := range strings.SplitSeq(opts, ",") {
		item = strings.TrimSpace(item)
		if item == "" || isGenericMountFlag(item) {
			continue
		}
		if why, ok := unsupportedFlags[item]; ok {
			errs = append(errs, &OptionError{Name: item, Err: invalidf("%s", why)})
			continue
		}
		if name, ok := mountFlagAliases[item]; ok {
			if err := c.Set(name, "false"); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		name, value, hasValue := strings.Cut(item, "=")
		o := lookup(name)
		switch {
		case o == nil:
			errs = append(errs, unknownOption(name, value))
			continue
		case !hasValue && o.kind == kindBool:
			value = "true"
		case !hasValue:
			errs = append(errs, &OptionError{Name: name, Allowed: o.allowed,
				Err: syntaxf("needs a value: %s=<%s>", name, o.kind)})
			continue
		}
		if err := c.Set(name, value); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Validate(); err != nil {
		// Flatten, so that the result is one list of problems.
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			errs = append(errs, joined.Unwrap()...)
		} else {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return base, errors.Join(errs...)
	}
	return c, nil
}

// ParseMount is Parse on top of MountDefault(totalRAM), what `ckptfs mount`
// does with its -o string, except that a memory_limit given in opts replaces
// the one derived from totalRAM before anything is derived from it: the dirty
// limits follow the budget the user chose (unless opts sets them too) rather
// than contradicting it.
func ParseMount(totalRAM uint64, opts string) (Config, error) {
	mem := mountMemory(totalRAM)
	for item := range strings.SplitSeq(opts, ",") {
		value, ok := strings.CutPrefix(strings.TrimSpace(item), "memory_limit=")
		if !ok {
			continue
		}
		// A bad value is reported by Parse below. The last one wins, as in
		// Parse; 0 asks for the derived budget.
		if n, err := ParseSize(value); err == nil {
			mem = n
			if n == 0 {
				mem = mountMemory(totalRAM)
			}
		}
	}
	return Parse(mountDefaultFor(mem), opts)
}

// Encode is the mount-option string of every option of c; Parse on top of any
// base reads c back from it.
func (c Config) Encode() string {
	parts := make([]string, len(options))
	for i, o := range options {
		parts[i] = o.name + "=" + o.get(&c)
	}
	return strings.Join(parts, ",")
}

// EncodeChanged is the mount-option string of the options of c that differ
// from base: Parse(base, c.EncodeChanged(base)) reads c back. Logs use it to
// show what a mount changed.
func (c Config) EncodeChanged(base Config) string {
	var parts []string
	for _, o := range options {
		if v := o.get(&c); v != o.get(&base) {
			parts = append(parts, o.name+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

// String is Encode.
func (c Config) String() string { return c.Encode() }

// OptionDoc documents one option.
type OptionDoc struct {
	Name    string   // as in -o name=value
	Field   string   // the Config field it sets
	Type    string   // size, integer, boolean, duration, enum or host:port
	Default string   // under Default, as option text
	Mount   string   // under MountDefault, when it differs from Default
	Allowed string   // allowed values
	Doc     string   // one line
	Aliases []string // other names it answers to (part_size, ...)
}

// Options lists every option, in a fixed order, for `ckptfs mount --help` and
// generated documentation.
func Options() []OptionDoc {
	d := Default()
	out := make([]OptionDoc, len(options))
	for i, o := range options {
		out[i] = OptionDoc{
			Name: o.name, Field: o.field, Type: o.kind.String(),
			Default: o.get(&d), Mount: o.mount, Allowed: o.allowed, Doc: o.doc,
			Aliases: aliasesOf(o.name),
		}
	}
	return out
}

// Markdown renders Options as a Markdown table, with the units and the dirty
// limit explained below it.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| option | type | default | `ckptfs mount` | allowed | description |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, o := range Options() {
		def := o.Default
		if def == "" {
			def = "(empty)"
		}
		mount := o.Mount
		if mount == "" {
			mount = "same"
		}
		name := "`" + o.Name + "`"
		if len(o.Aliases) > 0 {
			name += " (also `" + strings.Join(o.Aliases, "`, `") + "`)"
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s | %s |\n",
			name, o.Type, cell(def), cell(mount), cell(o.Allowed), cell(o.Doc))
	}
	b.WriteString("\n" + unitsText(code) + "\n")
	b.WriteString("\n" + dirtyLimitText(code) + "\n")
	return b.String()
}
