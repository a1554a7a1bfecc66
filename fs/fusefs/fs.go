package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// attrTimeout is how long the kernel may cache names and attributes. Short,
// so that other mounts' changes show quickly; every answer comes from memory.
const attrTimeout = time.Second

// idleTick is how often the mount retries the flush of closed files that
// are still dirty and forgets the orphans a cleaner has deleted. It sends
// nothing to the store unless a closed file is still dirty.
const idleTick = time.Second

// Options of New.
type Options struct {
	// Config is every tunable (config.ParseMount).
	Config config.Config
	// Root is the key prefix of the volume in the store: "" or ending in '/'.
	Root string
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// FsName is the source shown in the mount table (the store URL).
	FsName string
	// RequireVolume refuses a root without a volume descriptor (the error
	// is ErrNoVolume) instead of creating one there.
	RequireVolume bool
	// Build names the build in the metrics (ckptfs_build_info).
	Build BuildInfo
	// VolumeURL is the volume's store URL, the metrics' volume label once
	// stripped of user information and query; "" uses FsName.
	VolumeURL string
}

// FS is one mounted (or mountable) volume.
type FS struct {
	st     staging.Store
	root   string
	cfg    config.Config
	params engine.Params
	log    *zap.Logger
	ns     *namespace.Namespace
	vol    volume.Descriptor
	budget *engine.Budget
	fsName string

	// ctx is canceled by Close; it bounds the background loops.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the background loops

	mu      sync.Mutex
	files   map[string]*openFile // by file id; GUARDED_BY(mu)
	orphans map[string]struct{}  // ids of files whose last name went here; GUARDED_BY(mu)
	heads   *headCache           // last head seen of closed files; GUARDED_BY(mu)
	// pageVers: the version of the content the kernel's pages of a
	// closed file hold, by file id (pagecache.go); GUARDED_BY(mu).
	pageVers map[string]engine.Version

	// tasks are the head reads and prefetches the mount's requests start;
	// Close waits for them.
	tasks       tasks
	headFlight  singleflight.Group // one read of a head at a time, by file id
	prefetchSem chan struct{}      // room for prefetchConcurrency head reads
	// chains keeps the checkpoints of files listed under .checkpoints
	// (ckptchain.go); chainFlight shares their reads.
	chains      chainCache
	chainFlight singleflight.Group

	// used counts the requests that show someone uses the mount (lookups,
	// listings, opens, stats, changes): the refresh loop returns to
	// ns_refresh when it moved. wake, when the loop has backed off
	// (backedOff), has it look at once.
	used      atomic.Uint64
	backedOff atomic.Bool
	wake      chan struct{}
	// refreshEvery is the loop's interval now (nanoseconds) and refreshes
	// the count of refreshes made, for tests.
	refreshEvery atomic.Int64
	refreshes    atomic.Int64
	// refreshedAt is when the namespace was last read (Unix nanoseconds):
	// a lookup that misses past 2 × ns_refresh after it reads it first (see
	// freshen). nsFlight makes concurrent misses share that read.
	refreshedAt atomic.Int64
	nsFlight    singleflight.Group

	metrics    *Metrics
	metricsSrv *metricsServer // nil when -o metrics is off

	server    *fuse.Server
	auto      *autoUnmount // the fusermount3 watcher of an auto_unmount mount; nil without
	closeOnce sync.Once
	closeErr  error
}

// openFile is one file's engine shared by all its handles.
type openFile struct {
	id    string
	ready chan struct{} // closed when f or err is set
	f     *engine.File
	err   error
	refs  int // GUARDED_BY(FS.mu)
	// closing is set while the engine closes (it may wait for a WAL
	// publish and release the WAL's lease) and closed when it has: an open
	// meanwhile waits, so two engines of one file never overlap.
	closing chan struct{} // GUARDED_BY(FS.mu)
	// attrs are the attribute changes made with setAttrLater that the
	// next fsync or close waits for; GUARDED_BY(FS.mu).
	attrs []*namespace.Pending
	// pages is what is known of the kernel's pages of the file
	// (pagecache.go); GUARDED_BY(FS.mu).
	pages pagesState
	// piece is what the last piece of a copy by reference into this file
	// left for the next one (copy.go); GUARDED_BY(FS.mu).
	piece *copyPiece
}

// headInfo is what the kernel needs of a file that is not open.
type headInfo struct {
	size   int64
	mtime  int64
	cno    uint64
	format segment.Format
	seen   time.Time
	// blocks is st_blocks (512-byte units) from the data blocks the file
	// stores, when known (blocksKnown); otherwise fillAttr uses the size.
	blocks      uint64
	blocksKnown bool
}

// statHead is what the kernel needs of a file, from its engine's Stat.
func statHead(st engine.Stat) headInfo {
	return headInfo{size: st.Size, mtime: st.Mtime.UnixNano(), cno: st.Cno, format: st.Format,
		blocks: st.Blocks * uint64(st.BlockSize) / 512, blocksKnown: st.BlocksKnown}
}

// New opens the volume under o.Root: its descriptor (created if absent) and
// its namespace. Nothing is mounted yet.
func New(ctx context.Context, st staging.Store, o Options) (*FS, error) {
	if o.Root != "" && !strings.HasSuffix(o.Root, "/") {
		return nil, fmt.Errorf("volume root %q: must be empty or end with '/'", o.Root)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	volURL := o.VolumeURL
	if volURL == "" {
		volURL = o.FsName
	}
	metrics, st := newMetrics(st, o.Build, metricsVolume(volURL))
	vol, err := volume.OpenDescriptor(ctx, st, o.Root, o.Config, o.RequireVolume)
	if err != nil {
		return nil, err
	}
	ns, err := namespace.Open(ctx, st, o.Root, namespace.Options{
		Logger:        log.Named("namespace"),
		FinishTimeout: requestBound(o.Config),
	})
	if err != nil {
		return nil, fmt.Errorf("open namespace: %w", err)
	}
	budget := o.Config.MemoryLimit
	if budget <= 0 {
		budget = config.MountDefault(config.TotalRAM()).MemoryLimit
	}
	fctx, cancel := context.WithCancel(context.Background())
	fsys := &FS{
		st: st, root: o.Root, cfg: o.Config, params: Params(o.Config), log: log, ns: ns, vol: vol,
		budget: engine.NewBudget(budget), fsName: o.FsName,
		ctx: fctx, cancel: cancel,
		files: make(map[string]*openFile), orphans: make(map[string]struct{}), heads: newHeadCache(headCacheEntries),
		pageVers:    make(map[string]engine.Version),
		prefetchSem: make(chan struct{}, prefetchConcurrency), wake: make(chan struct{}, 1),
		metrics: metrics,
	}
	metrics.fsys = fsys
	fsys.refreshedAt.Store(time.Now().UnixNano()) // Open read the namespace
	if o.Config.Metrics != "" {
		if err := fsys.startMetrics(o.Config.Metrics); err != nil {
			cancel()
			return nil, err
		}
	}
	fsys.wg.Add(1)
	go fsys.loop()
	return fsys, nil
}

// Params maps the tunables of a mount onto the engine's.
func Params(c config.Config) engine.Params {
	p := engine.Params{
		Format:             c.Format,
		DataBlockSize:      int(c.DataBlockSize),
		MetaBlockSize:      int(c.MetaBlockSize),
		MaxObjectBytes:     c.SegmentMaxObjectBytes,
		ChunkSize:          c.SegmentMPUChunkSize,
		Concurrency:        c.SegmentMPUMaxConcurrency,
		StreamSegmentBytes: c.EffectiveStreamSegmentBytes(),
		DirtyLimit:         c.DirtyLimit(),
		ReadGetMaxBytes:    c.ReadGetMaxBytes,
		ConflictPolicy:     engine.ConflictRetry,
		WAL:                c.WAL,
		WALLeaseTTL:        c.WALLease,
	}
	if c.FlushConflictPolicy == config.ConflictFailFast {
		p.ConflictPolicy = engine.ConflictFailFast
	}
	return p
}

// Namespace is the volume's namespace.
func (fsys *FS) Namespace() *namespace.Namespace { return fsys.ns }

// Volume is the volume descriptor.
func (fsys *FS) Volume() volume.Descriptor { return fsys.vol }

// Budget is the memory budget shared by every file of the mount.
func (fsys *FS) Budget() *engine.Budget { return fsys.budget }

// prefix is where file id keeps its objects.
func (fsys *FS) prefix(id string) string { return volume.FilePrefix(fsys.root, id) }

func (fsys *FS) engineOptions(id string) engine.Options {
	return engine.Options{Params: fsys.params, FileID: id, FilesPrefix: volume.FilesPrefix(fsys.root), Logger: fsys.log.With(zap.String("file", id)), Budget: fsys.budget,
		WALCounters: &fsys.metrics.wal, ReadOnly: fsys.cfg.ReadOnly}
}

// Mount mounts the volume at mountpoint and serves it until Unmount (or an
// external unmount; see Wait).
func (fsys *FS) Mount(mountpoint string) error {
	if err := checkMountpoint(mountpoint); err != nil {
		return err
	}
	timeout := attrTimeout
	c := fsys.cfg
	// A mount by root is made with mount(2) directly, except with
	// auto_unmount, which only fusermount3 provides.
	direct := os.Geteuid() == 0 && !c.AutoUnmount
	kopts, flags := kernelOptions(c, direct)
	opts := &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:           fsys.fsName,
			Name:             "ckptfs",
			DirectMount:      direct,
			DirectMountFlags: flags,
			AllowOther:       c.AllowOther || c.AllowRoot,
			MaxWrite:         1 << 20,
			MaxReadAhead:     1 << 20,
			// Replies to reads are bytes in memory, never a file to
			// splice from: without this, go-fuse tries a splice for each
			// (three wasted system calls, and a failure logged for every
			// 1 MiB reply, larger than a pipe may grow) before it writes
			// the bytes.
			DisableSplice:        true,
			EnableSymlinkCaching: true,
			// FUSE_POSIX_ACL: the kernel enforces the ACLs this mount
			// stores; FUSE_DONT_MASK: the umask is applied here, where
			// the directory has no default ACL; FUSE_SETXATTR_EXT: the
			// kernel says when setting an ACL clears setgid (acl.go,
			// umaskFS).
			EnableAcl:         true,
			ExtraCapabilities: fuse.CAP_DONT_MASK | fuse.CAP_SETXATTR_EXT,
			Options:           kopts,
		},
		RootStableAttr: &fs.StableAttr{Ino: uint64(namespace.RootIno), Mode: syscall.S_IFDIR},
		UID:            uint32(os.Getuid()),
		GID:            uint32(os.Getgid()),
	}
	if fsys.fsName == "" {
		opts.MountOptions.FsName = "ckptfs"
	}
	// Every request is timed into ckptfs_fuse_operation_seconds.
	var raw fuse.RawFileSystem = newTimedFS(&umaskFS{fs.NewNodeFS(&node{fsys: fsys, ino: namespace.RootIno}, opts)}, fsys.metrics.fuseSeconds)
	if !c.Intr {
		raw = newFatalOnly(raw) // interrupt.go
	}
	if c.AllowRoot {
		raw = &allowRoot{RawFileSystem: raw, owner: uint32(os.Getuid())}
	}
	serveAt := mountpoint
	if c.AutoUnmount {
		abs, err := filepath.Abs(mountpoint)
		if err != nil {
			return fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		words := make([]string, 0, len(kopts)+4)
		for _, w := range kopts {
			words = append(words, escapeOption(w))
		}
		if opts.MountOptions.AllowOther {
			words = append(words, "allow_other")
		}
		words = append(words, "fsname="+escapeOption(opts.MountOptions.FsName), "subtype=ckptfs",
			fmt.Sprintf("max_read=%d", opts.MountOptions.MaxWrite))
		au, err := mountAutoUnmount(abs, words)
		if err != nil {
			return fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		fsys.auto = au
		serveAt = fmt.Sprintf("/dev/fd/%d", au.fd)
	}
	srv, err := fuse.NewServer(raw, serveAt, &opts.MountOptions)
	if err != nil {
		if fsys.auto != nil {
			fsys.auto.unmount()
			fsys.auto.stop()
			fsys.auto = nil
		}
		return fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		// The serve loop ends by itself when the mount did not happen.
		return fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	fsys.server = srv
	if err := setKernelReadAhead(mountpoint, opts.MountOptions.MaxReadAhead); err != nil {
		// Reads still work, in the kernel's default 128 KiB.
		fsys.log.Info("kernel read-ahead left at its default", zap.Error(err))
	}
	return nil
}

// setKernelReadAhead raises the kernel's read-ahead of the mount to n bytes.
// The FUSE INIT reply (MountOptions.MaxReadAhead) can only lower it below
// the mount's backing device default, 128 KiB, so a sequential reader's
// pages come in 128 KiB READs, one round trip through the mount each; with
// 1 MiB they come in READs of 1 MiB (up to MaxWrite, which sets the
// kernel's max_pages) and cost an eighth of the round trips. The setting is
// the device's read_ahead_kb in sysfs, writable by root only: a mount made
// without root keeps the default.
func setKernelReadAhead(mountpoint string, n int) error {
	// The device is the mount's own: never another filesystem's, should the
	// path not lead to this mount.
	var sfs unix.Statfs_t
	if err := unix.Statfs(mountpoint, &sfs); err != nil {
		return fmt.Errorf("read-ahead of %s: %w", mountpoint, err)
	}
	if sfs.Type != unix.FUSE_SUPER_MAGIC {
		return fmt.Errorf("read-ahead of %s: not a FUSE mount (filesystem type %#x)", mountpoint, sfs.Type)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return fmt.Errorf("read-ahead of %s: %w", mountpoint, err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(p, []byte(strconv.Itoa(n>>10)), 0); err != nil {
		return fmt.Errorf("read-ahead of %s: %w", mountpoint, err)
	}
	return nil
}

// checkMountpoint refuses a missing or non-empty mount point before the
// kernel is asked, with an error that says which.
func checkMountpoint(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mount point %s: not a directory", dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("mount point %s: not empty", dir)
	}
	return nil
}

// requestBound is the longest one store request takes to fail: the retry
// window, one wait before a retry (the retryer waits at most 20s), and the
// last attempt (connect, send with no stall, answer). It bounds what the
// mount does on its own (a refresh, the flush of a released file) and each
// flush at unmount, so that nothing waits on a dead store for longer.
func requestBound(c config.Config) time.Duration {
	return c.S3RetryMaxTime + 20*time.Second + c.S3ConnectTimeout + c.S3StallTimeout + c.S3RequestTimeout
}

// ErrMountBusy: the kernel refused to unmount (a file or directory of the
// volume is in use); the volume stays mounted and served.
var ErrMountBusy = errors.New("mount busy")

// Wait blocks until the volume is unmounted (by Unmount, fusermount3 -u or
// umount).
func (fsys *FS) Wait() {
	if fsys.server != nil {
		fsys.server.Wait()
	}
	if fsys.auto != nil {
		fsys.auto.stop()
	}
}

// Unmount unmounts the volume from the kernel, then flushes and closes every
// file (Close). It fails with ErrMountBusy, leaving everything mounted, when
// the mount is busy; any other error is Close's (files not flushed).
func (fsys *FS) Unmount() error {
	if fsys.server != nil {
		var err error
		for i := 0; i < 20; i++ {
			if fsys.auto != nil {
				// go-fuse cannot unmount a mount it was handed.
				err = fsys.auto.unmount()
			} else {
				err = fsys.server.Unmount()
			}
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("unmount: %w: %w", ErrMountBusy, err)
		}
		fsys.Wait()
	}
	return fsys.Close()
}

// Close flushes every file that holds unpublished data, closes every engine,
// and stops the background loops; unlinked files are left to the cleaner
// (see the package doc). Call it after the volume is unmounted (Wait
// returned); Unmount calls it. It returns the first flush error: the data of
// that file is lost (with the WAL on, what its log holds replays at the next
// mount).
//
// Each flush is bounded by requestBound; once one fails for want of an
// answer the store is taken as down and the remaining dirty files are not
// tried: each is named in the log and in the error, so that an unmount with
// the store down ends within about one request's bound.
func (fsys *FS) Close() error {
	fsys.closeOnce.Do(func() {
		defer fsys.stopMetrics()
		fsys.cancel()
		fsys.wg.Wait()
		fsys.tasks.close() // head reads and prefetches, canceled above
		fsys.ns.Close()    // trimming stopped; changes whose callers were killed, each bounded
		bound := requestBound(fsys.cfg)
		var storeDown error
		var errs []error
		fsys.mu.Lock()
		files := make([]*openFile, 0, len(fsys.files))
		for _, of := range fsys.files {
			files = append(files, of)
		}
		fsys.files = make(map[string]*openFile)
		fsys.mu.Unlock()
		for _, of := range files {
			<-of.ready
			if of.f == nil {
				continue
			}
			fsys.mu.Lock()
			closing := of.closing
			fsys.mu.Unlock()
			if closing != nil {
				<-closing // an engine closing on its own: let it finish
				continue
			}
			if of.f.Stat().Dirty && !fsys.isOrphan(of.id) {
				// Sync, not Flush: with the WAL a flush only starts a
				// publish, and the unmount waits for it to land.
				err := storeDown
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), bound)
					err = of.f.Sync(ctx)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						storeDown = fmt.Errorf("not tried, the store did not answer a flush before: %w", err)
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("flush file %s at unmount: %w", of.id, err))
					msg := "flush at unmount failed; data lost"
					if fsys.cfg.WAL {
						msg = "flush at unmount failed; the write-ahead log keeps the data for the next mount"
					}
					fsys.log.Error(msg, zap.String("file", of.id), zap.Error(err))
				}
			}
			of.f.Close()
		}
		fsys.closeErr = errors.Join(errs...)
	})
	return fsys.closeErr
}

// loop runs the periodic work of the mount: namespace refresh, the periodic
// flush, and the retry of flushes of closed files. It stops when Close
// cancels fsys.ctx.
//
// The refresh backs off while the mount is idle: after a refresh that found
// nothing new, when no one used the mount and it changed nothing since the
// last one, the next waits twice as long, up to ns_refresh_max; any of these
// brings it back to ns_refresh, a use at once (see touch). With the store
// down, refreshes fail and back off the same way unless the mount is used.
func (fsys *FS) loop() {
	defer fsys.wg.Done()
	base := fsys.cfg.NSRefresh
	most := fsys.cfg.RefreshMax()
	every := base
	fsys.refreshEvery.Store(int64(every))
	refresh := time.NewTimer(every)
	defer refresh.Stop()
	last := time.Now() // when the last refresh ended
	seq, used := fsys.ns.Seq(), fsys.used.Load()
	var flushC <-chan time.Time
	if fsys.cfg.FlushInterval > 0 {
		t := time.NewTicker(fsys.cfg.FlushInterval)
		defer t.Stop()
		flushC = t.C
	}
	idle := time.NewTicker(idleTick)
	defer idle.Stop()
	refreshFailing := false
	for {
		select {
		case <-fsys.ctx.Done():
			return
		case <-fsys.wake:
			// Someone uses the mount while the loop waits longer than
			// ns_refresh: the next refresh is due ns_refresh after the last.
			if every > base {
				every = base
				fsys.refreshEvery.Store(int64(every))
				fsys.backedOff.Store(false)
				refresh.Reset(max(0, time.Until(last.Add(base))))
			}
		case <-refresh.C:
			before := fsys.ns.Seq()
			began := time.Now()
			// Bounded: a refresh stuck on a dead store would hold up the
			// periodic flush and the unmount (Close waits for this loop).
			ctx, cancel := context.WithTimeout(fsys.ctx, requestBound(fsys.cfg))
			err := fsys.ns.Refresh(ctx)
			cancel()
			fsys.refreshes.Add(1)
			// Logged when refreshes start failing and when they work
			// again, not every tick of an outage.
			switch {
			case err != nil && fsys.ctx.Err() == nil && !refreshFailing:
				refreshFailing = true
				fsys.log.Warn("namespace refresh failed; other mounts' changes are not seen until it works again", zap.Error(err))
			case err == nil && refreshFailing:
				refreshFailing = false
				fsys.log.Info("namespace refresh works again")
			}
			// Something new (found now, or changed here since the last
			// refresh), or someone used the mount: stay at ns_refresh.
			after, u := fsys.ns.Seq(), fsys.used.Load()
			if after != before || before != seq || u != used {
				every = base
			} else {
				every = min(2*every, most)
			}
			seq, used = after, u
			fsys.backedOff.Store(every > base)
			// A use between the load above and the store missed the wake.
			if every > base && fsys.used.Load() != used {
				every = base
				fsys.backedOff.Store(false)
			}
			fsys.refreshEvery.Store(int64(every))
			last = time.Now()
			if err == nil {
				// When it began: what was in the log then, it has read
				// (missingHead relies on it).
				fsys.refreshedAt.Store(began.UnixNano())
			}
			refresh.Reset(every)
		case <-flushC:
			fsys.flushAll(fsys.ctx)
		case <-idle.C:
			fsys.flushIdle(fsys.ctx)
			fsys.pruneOrphans()
		}
	}
}

// touch records that a request of someone using the mount arrived, for the
// refresh loop's backoff: one atomic add, and a wake of the loop (never a
// wait) when it has backed off. The request goes on with the namespace as it
// is; the refresh it brings on serves the requests after it.
func (fsys *FS) touch() {
	fsys.used.Add(1)
	if fsys.backedOff.Load() {
		select {
		case fsys.wake <- struct{}{}:
		default:
		}
	}
}

// freshen reads what other mounts changed when the last read of the
// namespace is older than twice ns_refresh (the loop backed off while the
// mount was idle), and says whether it did. A lookup that misses calls it
// before it answers ENOENT, so that another mount's new name shows within
// 2 × ns_refresh to a mount that looks for it, idle or not. A mount in use
// reads the log every ns_refresh anyway, so its misses (every create looks
// its name up first) do not wait for a read. Concurrent misses share one
// read, which is bounded by the request bounds and by ctx.
func (fsys *FS) freshen(ctx context.Context) bool {
	if time.Since(time.Unix(0, fsys.refreshedAt.Load())) < 2*fsys.cfg.NSRefresh {
		return false
	}
	ch := fsys.nsFlight.DoChan("refresh", func() (any, error) {
		rctx, cancel := context.WithTimeout(fsys.ctx, requestBound(fsys.cfg))
		defer cancel()
		start := time.Now()
		err := fsys.ns.Refresh(rctx)
		if err == nil {
			fsys.refreshedAt.Store(start.UnixNano())
		}
		return nil, err
	})
	select {
	case r := <-ch:
		return r.Err == nil
	case <-ctx.Done():
		return false
	}
}

// errReaped: a file's head is missing and the namespace, read again, names
// the file no more: another mount removed it and a cleaner deleted it.
var errReaped = fmt.Errorf("file removed on another mount and deleted: %w", namespace.ErrNotExist)

// missingHead decides about file id, whose head a read that started at
// start found missing. Heads are stored when a file is created, so the file
// may have been unlinked on another mount and deleted by a cleaner while
// this mount's view of the names lagged: nothing is decided before the
// namespace is read again, by a read that started after start (the unlink
// is in the log before a cleaner may delete). A file no longer named is
// errReaped (ENOENT); one still named has no head because it was made
// before heads were stored at create, and is empty.
func (fsys *FS) missingHead(ctx context.Context, id string, start time.Time) error {
	if fsys.unlinked(id) {
		return errReaped
	}
	for range 2 { // a read in flight may have started before start
		if fsys.refreshedAt.Load() >= start.UnixNano() {
			break
		}
		ch := fsys.nsFlight.DoChan("refresh", func() (any, error) {
			rctx, cancel := context.WithTimeout(fsys.ctx, requestBound(fsys.cfg))
			defer cancel()
			at := time.Now()
			err := fsys.ns.Refresh(rctx)
			if err == nil {
				fsys.refreshedAt.Store(at.UnixNano())
			}
			return nil, err
		})
		select {
		case r := <-ch:
			if r.Err != nil {
				return fmt.Errorf("file %s has no head; read the namespace again: %w", id, r.Err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !fsys.ns.Named(id) {
		fsys.mu.Lock()
		fsys.heads.remove(id)
		fsys.mu.Unlock()
		return errReaped
	}
	return nil
}

// flushAll publishes a checkpoint of every dirty file.
func (fsys *FS) flushAll(ctx context.Context) {
	for _, of := range fsys.snapshotFiles() {
		if of.f.Stat().Dirty && !fsys.isOrphan(of.id) {
			if _, err := fsys.flush(ctx, of); err != nil && ctx.Err() == nil {
				fsys.log.Warn("periodic flush failed; data stays dirty", zap.String("file", of.id), zap.Error(err))
			}
		}
	}
	fsys.flushIdle(ctx)
}

// flushIdle retries the flush of files no handle holds any more, and closes
// them once clean.
func (fsys *FS) flushIdle(ctx context.Context) {
	for _, of := range fsys.snapshotFiles() {
		fsys.mu.Lock()
		idle := of.refs == 0
		fsys.mu.Unlock()
		if !idle {
			continue
		}
		if of.f.Stat().Dirty && !fsys.isOrphan(of.id) && fsys.cfg.FlushInterval > 0 {
			if _, err := fsys.flush(ctx, of); err != nil {
				fsys.log.Warn("flush of a closed file failed; data stays dirty", zap.String("file", of.id), zap.Error(err))
				continue
			}
		}
		fsys.closeIfIdle(of)
	}
}

// snapshotFiles lists the files whose engine is open.
func (fsys *FS) snapshotFiles() []*openFile {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	out := make([]*openFile, 0, len(fsys.files))
	for _, of := range fsys.files {
		if of.closing != nil {
			continue
		}
		select {
		case <-of.ready:
			if of.f != nil {
				out = append(out, of)
			}
		default:
		}
	}
	return out
}

// acquire returns the shared engine of file id, opening it on first use (and
// creating its head if the namespace names a file whose head was never
// written). Release it with release.
func (fsys *FS) acquire(ctx context.Context, id string) (*openFile, error) {
	of, _, err := fsys.acquireFile(ctx, id)
	return of, err
}

// acquireFile is acquire, and says whether the engine was opened by this
// call (fresh: it read the head just now) rather than shared.
func (fsys *FS) acquireFile(ctx context.Context, id string) (*openFile, bool, error) {
	fsys.mu.Lock()
	of := fsys.files[id]
	for of != nil && of.closing != nil {
		ch := of.closing
		fsys.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		fsys.mu.Lock()
		of = fsys.files[id]
	}
	if of != nil {
		of.refs++
		fsys.mu.Unlock()
		<-of.ready
		if of.err != nil {
			fsys.mu.Lock()
			of.refs--
			fsys.mu.Unlock()
			return nil, false, of.err
		}
		return of, false, nil
	}
	of = &openFile{id: id, ready: make(chan struct{}), refs: 1}
	fsys.files[id] = of
	fsys.mu.Unlock()

	start := time.Now()
	f, err := engine.Open(ctx, fsys.st, fsys.prefix(id), fsys.engineOptions(id))
	if errors.Is(err, engine.ErrNotExist) {
		// An unlinked file whose data a cleaner deleted must not be
		// brought back: only a file still named once the namespace is read
		// again is opened empty here (one made before heads were stored at
		// create and never written, or one whose create on another mount
		// has not stored its head yet). Nothing is sent: its first publish
		// creates the head with If-None-Match.
		if err = fsys.missingHead(ctx, id, start); err == nil {
			f, err = engine.Create(ctx, fsys.st, fsys.prefix(id), fsys.engineOptions(id))
			if errors.Is(err, engine.ErrExists) {
				f, err = engine.Open(ctx, fsys.st, fsys.prefix(id), fsys.engineOptions(id))
			}
		}
	}
	of.f, of.err = f, err
	close(of.ready)
	if err != nil {
		fsys.mu.Lock()
		delete(fsys.files, id)
		fsys.mu.Unlock()
		return nil, false, err
	}
	return of, true, nil
}

// adopt registers f, just created, as the open engine of file id with one
// reference.
func (fsys *FS) adopt(id string, f *engine.File) *openFile {
	// A new file's inode has no pages in the kernel yet: they are exact.
	of := &openFile{id: id, ready: make(chan struct{}), f: f, refs: 1,
		pages: pagesState{known: true, foreign: f.ForeignChanges()}}
	close(of.ready)
	fsys.mu.Lock()
	fsys.files[id] = of
	fsys.mu.Unlock()
	return of
}

// release drops one reference. The last one flushes the file when flush is
// set and it is dirty, then closes its engine unless it is still dirty.
func (fsys *FS) release(ctx context.Context, of *openFile, flush bool) error {
	fsys.mu.Lock()
	of.refs--
	last := of.refs == 0
	fsys.mu.Unlock()
	if !last {
		return nil
	}
	var err error
	if flush && of.f.Stat().Dirty && !fsys.isOrphan(of.id) {
		if _, err = fsys.flush(ctx, of); err != nil {
			fsys.log.Warn("flush at last close failed; data stays dirty", zap.String("file", of.id), zap.Error(err))
		}
	}
	fsys.closeIfIdle(of)
	return err
}

// closeIfIdle closes the engine of of if no handle holds it and nothing in it
// waits to be published (or the file is unlinked, so nothing needs to be).
func (fsys *FS) closeIfIdle(of *openFile) {
	orphan := fsys.isOrphan(of.id)
	if !orphan && of.f.Stat().Dirty {
		return
	}
	fsys.mu.Lock()
	if fsys.files[of.id] != of || of.refs != 0 || of.closing != nil {
		fsys.mu.Unlock()
		return
	}
	of.closing = make(chan struct{})
	fsys.mu.Unlock()
	of.f.Close()
	fsys.mu.Lock()
	if fsys.files[of.id] == of {
		delete(fsys.files, of.id)
	}
	fsys.pagesClosedLocked(of, orphan)
	if !orphan {
		st := of.f.Stat()
		h := statHead(st)
		h.seen = time.Now()
		fsys.heads.put(of.id, h)
	}
	close(of.closing)
	fsys.mu.Unlock()
}

func (fsys *FS) isOrphan(id string) bool {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	_, ok := fsys.orphans[id]
	return ok
}

// unlinked says whether file id has no name left, here or on any mount
// whose changes this one has read.
func (fsys *FS) unlinked(id string) bool {
	return fsys.isOrphan(id) || fsys.ns.Orphaned(id)
}

// orphaned records that file id lost its last name here.
func (fsys *FS) orphaned(n namespace.Node) {
	if n.Kind != namespace.KindFile || n.Nlink != 0 || n.FileID == "" {
		return
	}
	fsys.mu.Lock()
	fsys.orphans[n.FileID] = struct{}{}
	fsys.heads.remove(n.FileID)
	fsys.mu.Unlock()
}

// pruneOrphans forgets the unlinked files that no handle holds here and that
// the namespace no longer holds as orphans: a cleaner deleted them.
func (fsys *FS) pruneOrphans() {
	fsys.mu.Lock()
	none := len(fsys.orphans) == 0
	fsys.mu.Unlock()
	if none {
		return
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	for id := range fsys.orphans {
		if fsys.files[id] == nil && !fsys.ns.Orphaned(id) {
			delete(fsys.orphans, id)
		}
	}
}

// replayedHead handles a file whose head says WAL records may follow it.
// If there are, the size and mtime the kernel caches must be those of every
// write durable in the log, not of the last checkpoint:
//   - when no writer that may be alive holds the log (its lease is absent, or
//     names a process of this host that ended, a zombie included), the file
//     is opened, which replays the records and publishes them;
//   - otherwise (a live writer, or one whose lease expired but that may
//     still run) nothing is taken or published: the records are
//     read and their effect on size and mtime reported (engine.ViewWAL), as
//     they stand now; the answer is cached like a head.
//
// A stat never replays on a live writer's behalf: that would take its lease
// (after a store outage stopped its renewals) and publish under it.
func (fsys *FS) replayedHead(ctx context.Context, id string, info staging.ObjectInfo) (headInfo, bool, error) {
	applied, tracked, err := engine.HeadWAL(info)
	if err != nil || !tracked {
		return headInfo{}, false, nil
	}
	prefix := fsys.prefix(id)
	pending, err := wal.After(ctx, fsys.st, prefix, applied)
	if err != nil {
		return headInfo{}, false, err
	}
	if !pending {
		return headInfo{}, false, nil
	}
	// A read-only mount never replays: it shows the records as a reader
	// beside a live writer does (engine.Options.ReadOnly).
	held := fsys.cfg.ReadOnly
	if !held {
		if held, err = wal.Held(ctx, fsys.st, prefix); err != nil {
			return headInfo{}, false, err
		}
	}
	if !held {
		of, err := fsys.acquire(ctx, id)
		if err != nil {
			return headInfo{}, false, fmt.Errorf("replay the write-ahead log of %s: %w", id, err)
		}
		st := of.f.Stat()
		fsys.release(ctx, of, false)
		h := statHead(st)
		h.seen = time.Now()
		return h, true, nil
	}
	v, err := engine.ViewWAL(ctx, fsys.st, prefix, fsys.engineOptions(id))
	if err != nil {
		return headInfo{}, false, fmt.Errorf("read the write-ahead log of %s: %w", id, err)
	}
	h := headInfo{size: v.Size, mtime: v.Mtime.UnixNano(), cno: v.Inode.Cno, format: v.Inode.Format, seen: time.Now()}
	fsys.mu.Lock()
	fsys.heads.put(id, h)
	fsys.mu.Unlock()
	return h, true, nil
}

// fileHead returns size, mtime, checkpoint and format of file id: from its
// open engine, or its head object (remembered for max(ns_refresh, 1s), in a
// bounded cache; the read is shared with any other caller, a prefetch
// included, that reads it meanwhile).
func (fsys *FS) fileHead(ctx context.Context, id string) (headInfo, error) {
	fsys.mu.Lock()
	of := fsys.files[id]
	h, cached := fsys.heads.get(id)
	fsys.mu.Unlock()
	if of != nil {
		select {
		case <-of.ready:
			if of.f != nil {
				st := of.f.Stat()
				return statHead(st), nil
			}
		default:
		}
	}
	if cached && time.Since(h.seen) < fsys.headTTL() {
		return h, nil
	}
	return fsys.fetchHead(ctx, id)
}

// readHead reads the head object of file id and remembers what it says (see
// replayedHead for a head that WAL records may follow). ctx is the mount's:
// the read is shared by every caller that waits for it (fetchHead).
func (fsys *FS) readHead(ctx context.Context, id string) (headInfo, error) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, requestBound(fsys.cfg))
	hd, info, err := segment.ReadHead(rctx, fsys.st, volume.HeadKey(fsys.prefix(id)), segment.FileTag(id))
	cancel()
	if errors.Is(err, staging.ErrNotFound) {
		if err := fsys.missingHead(ctx, id, start); err != nil {
			return headInfo{}, err
		}
		// Still named: made before heads were stored at create and never
		// written: empty, and remembered like a head.
		h := headInfo{format: fsys.params.Format, blocksKnown: true}
		fsys.remember(id, h, start)
		h.seen = start
		return h, nil
	}
	if err != nil {
		return headInfo{}, err
	}
	if h, ok, err := fsys.replayedHead(ctx, id, info); err != nil {
		// Reporting the head would show the file without writes durable in
		// its log.
		return headInfo{}, err
	} else if ok {
		return h, nil
	}
	h := headInfo{size: int64(hd.Inode.Size), mtime: hd.Inode.MtimeNs, cno: hd.Inode.Cno, format: hd.Inode.Format, seen: time.Now(),
		blocks: hd.Blocks * uint64(hd.Inode.DataBlockSize) / 512, blocksKnown: hd.BlocksKnown}
	fsys.remember(id, h, start)
	return h, nil
}
