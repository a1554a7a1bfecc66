package fusefs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// The heads of files not open here: what a stat reports of them, and how a
// listing has them read before the stats that follow it ask.

// headCacheEntries bounds the heads remembered. An entry costs about 250
// bytes (the entry with its list links and headInfo, 144 bytes, a size
// class of its own; the 32-byte file id, shared with the map key; the map's slot
// and growth room), so the cache holds at most about 16 MiB however many
// files the volume has.
const headCacheEntries = 1 << 16

// Prefetch of the heads a directory listing names.
const (
	// prefetchConcurrency is the most head reads a mount's prefetches have
	// in flight at once: enough to hide a 40 ms round trip behind a cold
	// ls -lR, few enough to leave the link to the mount's own work.
	prefetchConcurrency = 32
	// prefetchWindow is how far ahead of what a listing returned the heads
	// are prefetched, in entries; prefetchChunk is how much of the window
	// is used up before more is asked for, so that a listing of a huge
	// directory that stops early does not read every head.
	prefetchWindow = 4096
	prefetchChunk  = 1024
)

// errUnmounted: the volume is closed; nothing more is read.
var errUnmounted = errors.New("volume unmounted")

// headCache is a least-recently-used cache of heads by file id, holding at
// most max entries. GUARDED_BY(FS.mu), like the open-file table it
// complements.
type headCache struct {
	max int
	m   map[string]*headEntry
	// root is the sentinel of a circular list: root.next is the most
	// recently used entry, root.prev the least.
	root headEntry
}

type headEntry struct {
	id         string
	h          headInfo
	prev, next *headEntry
}

func newHeadCache(max int) *headCache {
	c := &headCache{max: max, m: make(map[string]*headEntry)}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

func (c *headCache) unlink(e *headEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *headCache) pushFront(e *headEntry) {
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
}

// get returns the head of id and marks it used.
func (c *headCache) get(id string) (headInfo, bool) {
	e := c.m[id]
	if e == nil {
		return headInfo{}, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.h, true
}

// peek returns the head of id without marking it used.
func (c *headCache) peek(id string) (headInfo, bool) {
	if e := c.m[id]; e != nil {
		return e.h, true
	}
	return headInfo{}, false
}

// put remembers h as the head of id, unless what is remembered was seen
// later than h (a read that started before a close of this mount must not
// replace what the close left), and forgets the least recently used entry
// beyond max.
func (c *headCache) put(id string, h headInfo) {
	if e := c.m[id]; e != nil {
		if e.h.seen.After(h.seen) {
			return
		}
		e.h = h
		c.unlink(e)
		c.pushFront(e)
		return
	}
	var e *headEntry
	if len(c.m) >= c.max {
		e = c.root.prev
		c.unlink(e)
		delete(c.m, e.id)
		*e = headEntry{}
	} else {
		e = new(headEntry)
	}
	e.id, e.h = id, h
	c.m[id] = e
	c.pushFront(e)
}

func (c *headCache) remove(id string) {
	if e := c.m[id]; e != nil {
		c.unlink(e)
		delete(c.m, id)
	}
}

func (c *headCache) len() int { return len(c.m) }

// tasks runs the goroutines that requests of the mount start (head reads and
// prefetches): close refuses new ones and waits for those running. They are
// bounded by FS.ctx, which Close cancels first.
type tasks struct {
	mu     sync.Mutex
	closed bool // GUARDED_BY(mu)
	wg     sync.WaitGroup
}

// goFn runs f in a goroutine of t; false if t is closed (f does not run).
func (t *tasks) goFn(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Go(f)
	return true
}

func (t *tasks) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// headTTL is how long a head read from the store is taken as current: other
// mounts' writes show within it.
func (fsys *FS) headTTL() time.Duration { return max(fsys.cfg.NSRefresh, attrTimeout) }

// fetchHead reads the head of file id from the store, in one read shared by
// every caller that asks for the same file meanwhile (stats and prefetches
// alike), and remembers it. The read runs in a goroutine of the mount, bound
// to the mount's life rather than to the caller's request: a caller that is
// interrupted returns at once, without failing the others waiting on it.
func (fsys *FS) fetchHead(ctx context.Context, id string) (headInfo, error) {
	type result struct {
		h   headInfo
		err error
	}
	done := make(chan result, 1)
	if !fsys.tasks.goFn(func() {
		h, err := fsys.sharedHead(id)
		done <- result{h, err}
	}) {
		return headInfo{}, errUnmounted
	}
	select {
	case r := <-done:
		return r.h, r.err
	case <-ctx.Done():
		return headInfo{}, ctx.Err()
	}
}

// sharedHead is readHead, shared by concurrent callers for one id.
func (fsys *FS) sharedHead(id string) (headInfo, error) {
	v, err, _ := fsys.headFlight.Do(id, func() (any, error) {
		// A read that ended between the caller's look at the cache and
		// this one left its answer there: no second read.
		fsys.mu.Lock()
		h, ok := fsys.heads.peek(id)
		fsys.mu.Unlock()
		if ok && time.Since(h.seen) < fsys.headTTL() {
			return h, nil
		}
		return fsys.readHead(fsys.ctx, id)
	})
	h, _ := v.(headInfo)
	return h, err
}

// remember caches h as the head of id, read from the store by a read that
// started at start, unless the file lost its last name here meanwhile (its
// entry would only take room).
func (fsys *FS) remember(id string, h headInfo, start time.Time) {
	h.seen = start
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if _, orphan := fsys.orphans[id]; !orphan {
		fsys.heads.put(id, h)
	}
}

// wantHead says whether a prefetch should read the head of file id: it is
// not open here (the engine answers), not unlinked here, and not cached.
func (fsys *FS) wantHead(id string) bool {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if fsys.files[id] != nil {
		return false
	}
	if _, orphan := fsys.orphans[id]; orphan {
		return false
	}
	h, ok := fsys.heads.peek(id)
	return !ok || time.Since(h.seen) >= fsys.headTTL()
}

// prefetch starts reading, in the background, the heads of the files among
// ents whose head is wanted (wantHead), at most prefetchConcurrency at once
// for the whole mount, in the order of ents: the order in which the kernel
// looks the names up after a listing. A read that fails leaves the file
// uncached: its stat reads the head itself and reports the error.
func (fsys *FS) prefetch(ents []namespace.Dirent) {
	fsys.tasks.goFn(func() {
		for _, e := range ents {
			if e.Kind != namespace.KindFile {
				continue
			}
			n, err := fsys.ns.GetNode(fsys.ctx, e.Ino)
			if err != nil || n.FileID == "" || !fsys.wantHead(n.FileID) {
				continue
			}
			select {
			case fsys.prefetchSem <- struct{}{}:
			case <-fsys.ctx.Done():
				return
			}
			id := n.FileID
			// A stat may have read it while this waited for room.
			if !fsys.wantHead(id) {
				<-fsys.prefetchSem
				continue
			}
			if !fsys.tasks.goFn(func() {
				defer func() { <-fsys.prefetchSem }()
				fsys.sharedHead(id)
			}) {
				<-fsys.prefetchSem
				return
			}
		}
	})
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
	// hint is where the head said the file's map is (Height 0: not
	// known, or nothing to load: an empty map, or a part 0 the head
	// embeds); an open for reading loads from it while it reads the
	// head again (engine.MapHint).
	hint engine.MapHint
}

// statHead is what the kernel needs of a file, from its engine's Stat.
func statHead(st engine.Stat) headInfo {
	return headInfo{size: st.Size, mtime: st.Mtime.UnixNano(), cno: st.Cno, format: st.Format,
		blocks: st.Blocks * uint64(st.BlockSize) / 512, blocksKnown: st.BlocksKnown}
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
	unlinked, err := fsys.unlinked(ctx, id)
	if err != nil {
		return fmt.Errorf("file %s has no head; is it unlinked: %w", id, err)
	}
	if unlinked {
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
	named, err := fsys.ns.Named(ctx, id)
	if err != nil {
		return fmt.Errorf("file %s has no head; is it named: %w", id, err)
	}
	if !named {
		fsys.mu.Lock()
		fsys.heads.remove(id)
		fsys.mu.Unlock()
		return errReaped
	}
	return nil
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
	applied, tracked, err := wal.HeadApplied(info.Metadata)
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
	if !cached {
		return fsys.fetchHead(ctx, id)
	}
	// Seen before, so an outage gets the attributes the mount last saw
	// rather than a wait of op_timeout a file (ls -l): at once while the
	// store is silent, else after statWait. The read goes on in the
	// background and refreshes the cache when the store answers. Opens
	// still read the head (close-to-open): only stat is lenient.
	if fsys.storeSilent() {
		fsys.tasks.goFn(func() { fsys.sharedHead(id) }) // it remembers what it finds
		fsys.staleStat(id, h.seen, errStoreSilent)
		return h, nil
	}
	wctx, cancel := context.WithTimeout(ctx, statWait)
	fresh, err := fsys.fetchHead(wctx, id)
	cancel()
	switch {
	case err == nil:
		return fresh, nil
	case ctx.Err() == nil && unanswered(err):
		fsys.staleStat(id, h.seen, err)
		return h, nil
	}
	return fresh, err
}

// errStoreSilent: the store answered nothing for statWait with requests in
// flight.
var errStoreSilent = errors.New("the store answered no request for a few seconds")

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
	if len(hd.Embed) == 0 && hd.Inode.Lineage == 0 {
		h.hint = engine.MapHint{Format: hd.Inode.Format, MetaBlockSize: hd.Inode.MetaBlockSize,
			Root: hd.Inode.Root, Height: hd.Inode.Height, Parts: hd.Inode.Parts}
	}
	fsys.remember(id, h, start)
	return h, nil
}
