package fusefs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// The heads of files not open here: what a stat reports of them, and how a
// listing has them read before the stats that follow it ask.

// headCacheEntries bounds the heads remembered. An entry costs about 200
// bytes (the entry with its list links and headInfo, about 120 bytes with the
// size class; the 32-byte file id, shared with the map key; the map's slot
// and growth room), so the cache holds at most about 13 MiB however many
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
			n, err := fsys.ns.GetNode(e.Ino)
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
