package fusefs

import (
	clist "container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// What .checkpoints/<file>/ costs (see the package doc, "Old checkpoints"):
// the chain of a file's checkpoints is followed from its head through each
// part 0's base inode, one header read per checkpoint. A listing reads it
// once and the mount keeps it, by the head's checkpoint number: until the
// head moves, a later listing costs one read of the head (every listing
// reads it, so that it is current), and the lookups of its names (ls -l,
// readdirplus) nothing within headTTL of the last read of the head, one
// read after. A lookup of one number that is not in a kept chain reads the
// head and that checkpoint's header, never the chain.

const (
	// chainReadAhead is how many headers a chain read has in flight:
	// checkpoint numbers mostly follow one another, so the headers of the
	// numbers just below the one being read are asked for with it. A number
	// skipped (a flush that failed) wastes at most this many reads.
	chainReadAhead = 16
	// chainCacheFiles and chainCachePoints bound the kept chains: at most
	// that many files and checkpoints in all (24 bytes each, 6 MiB), least
	// recently used first out. A chain longer than chainCachePoints is read
	// for each listing, still one read per checkpoint.
	chainCacheFiles  = 256
	chainCachePoints = 1 << 18
)

// errNoCheckpoint: the file has no retained checkpoint of that number.
var errNoCheckpoint = errors.New("no such checkpoint")

// ckptPoint is what the tree of old checkpoints shows of one.
type ckptPoint struct {
	cno   uint64
	size  int64
	mtime int64
}

func pointOf(ino segment.Inode) ckptPoint {
	return ckptPoint{cno: ino.Cno, size: int64(ino.Size), mtime: ino.MtimeNs}
}

// chainEntry is what the mount keeps of one file's checkpoints.
type chainEntry struct {
	id       string
	read     time.Time      // when head was read
	head     segment.Head   // the head last read (Embed dropped)
	missing  bool           // no head: the file was never published
	points   []ckptPoint    // the chain from head.Inode.Cno, newest first, if known
	pointCno uint64         // the head cno points was read from
	known    bool           // points is set
	elem     *clist.Element // in chainCache.lru
}

// chainCache keeps the heads and chains of the files whose checkpoints were
// looked at, bounded (chainCacheFiles, chainCachePoints).
type chainCache struct {
	mu     sync.Mutex
	m      map[string]*chainEntry // GUARDED_BY(mu)
	lru    clist.List             // of *chainEntry, most recent first; GUARDED_BY(mu)
	points int                    // in all entries; GUARDED_BY(mu)
}

func (c *chainCache) get(id string) (chainEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[id]
	if e == nil {
		return chainEntry{}, false
	}
	c.lru.MoveToFront(e.elem)
	return *e, true
}

// put keeps e (a copy), dropping the least recently used entries past the
// bounds.
func (c *chainCache) put(e chainEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*chainEntry)
	}
	if len(e.points) > chainCachePoints {
		e.points, e.known = nil, false
	}
	if old := c.m[e.id]; old != nil {
		c.points -= len(old.points)
		c.lru.Remove(old.elem)
		delete(c.m, e.id)
	}
	ne := new(chainEntry)
	*ne = e
	ne.elem = c.lru.PushFront(ne)
	c.m[e.id] = ne
	c.points += len(ne.points)
	for len(c.m) > chainCacheFiles || c.points > chainCachePoints {
		last := c.lru.Back().Value.(*chainEntry)
		c.lru.Remove(last.elem)
		delete(c.m, last.id)
		c.points -= len(last.points)
	}
}

// ckptHead returns what is kept of file id with its head read within
// headTTL, reading the head when it is older (one read shared by concurrent
// callers for one file, in a task of the mount, as fetchHead).
func (fsys *FS) ckptHead(ctx context.Context, id string) (chainEntry, error) {
	return fsys.ckptHeadWithin(ctx, id, fsys.headTTL())
}

// ckptHeadWithin is ckptHead with the head read within maxAge (0: read
// now).
func (fsys *FS) ckptHeadWithin(ctx context.Context, id string, maxAge time.Duration) (chainEntry, error) {
	asked := time.Now()
	e, err := fsys.ckptHeadOnce(ctx, id, maxAge)
	if err == nil && maxAge == 0 && e.read.Before(asked) {
		// Joined a read that started before this call: a checkpoint
		// published in between may be missing from it. The next read
		// starts after that one ended, so after this call began.
		e, err = fsys.ckptHeadOnce(ctx, id, maxAge)
	}
	return e, err
}

func (fsys *FS) ckptHeadOnce(ctx context.Context, id string, maxAge time.Duration) (chainEntry, error) {
	if e, ok := fsys.chains.get(id); ok && time.Since(e.read) < maxAge {
		return e, nil
	}
	type result struct {
		e   chainEntry
		err error
	}
	done := make(chan result, 1)
	if !fsys.tasks.goFn(func() {
		v, err, _ := fsys.chainFlight.Do("head/"+id, func() (any, error) {
			if e, ok := fsys.chains.get(id); ok && time.Since(e.read) < maxAge {
				return e, nil
			}
			return fsys.readCkptHead(id)
		})
		e, _ := v.(chainEntry)
		done <- result{e, err}
	}) {
		return chainEntry{}, errUnmounted
	}
	select {
	case r := <-done:
		return r.e, r.err
	case <-ctx.Done():
		return chainEntry{}, ctx.Err()
	}
}

// readCkptHead reads the head of file id and keeps it, with the chain kept
// before when the head has not moved since.
func (fsys *FS) readCkptHead(id string) (chainEntry, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(fsys.ctx, requestBound(fsys.cfg))
	defer cancel()
	hd, _, err := segment.ReadHead(ctx, fsys.st, volume.HeadKey(fsys.prefix(id)), segment.FileTag(id))
	e := chainEntry{id: id, read: start}
	switch {
	case errors.Is(err, staging.ErrNotFound):
		e.missing = true
	case err != nil:
		return chainEntry{}, fmt.Errorf("checkpoints of file %s: %w", id, err)
	default:
		if len(hd.Embed) == 0 {
			hd.Part0 = segment.Header{}
		}
		hd.Embed = nil // only its header is used
		e.head = hd
	}
	if old, ok := fsys.chains.get(id); ok && old.known && !e.missing && old.pointCno == hd.Inode.Cno {
		e.points, e.pointCno, e.known = old.points, old.pointCno, true
	}
	fsys.chains.put(e)
	return e, nil
}

// ckptChain lists the checkpoints of file id, newest first: the kept chain
// while the head has not moved, otherwise read once (readChain) and kept.
// The head is read for every listing, so that a listing shows every
// checkpoint published before it began, by this mount or another: one kept
// for headTTL could name a checkpoint the cleaner has since removed, and
// not the one that replaced it.
func (fsys *FS) ckptChain(ctx context.Context, id string) ([]ckptPoint, error) {
	e, err := fsys.ckptHeadWithin(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	if e.missing || e.head.Inode.Cno == 0 {
		return nil, nil
	}
	if e.known && e.pointCno == e.head.Inode.Cno {
		return e.points, nil
	}
	type result struct {
		pts []ckptPoint
		err error
	}
	done := make(chan result, 1)
	if !fsys.tasks.goFn(func() {
		key := fmt.Sprintf("chain/%s/%d", id, e.head.Inode.Cno)
		v, err, _ := fsys.chainFlight.Do(key, func() (any, error) {
			rctx, cancel := context.WithTimeout(fsys.ctx, requestBound(fsys.cfg))
			defer cancel()
			pts, err := readChain(rctx, fsys.st, fsys.prefix(id), segment.FileTag(id), e.head)
			if err != nil {
				return nil, fmt.Errorf("checkpoints of file %s: %w", id, err)
			}
			// Kept only if no later head was read meanwhile.
			if cur, ok := fsys.chains.get(id); ok && !cur.missing && cur.head.Inode.Cno == e.head.Inode.Cno {
				cur.points, cur.pointCno, cur.known = pts, e.head.Inode.Cno, true
				fsys.chains.put(cur)
			}
			return pts, nil
		})
		pts, _ := v.([]ckptPoint)
		done <- result{pts, err}
	}) {
		return nil, errUnmounted
	}
	select {
	case r := <-done:
		return r.pts, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ckptOne returns checkpoint cno of file id, or errNoCheckpoint: from the
// kept chain when it is the head's, else from the head (the head's own
// checkpoint) or from that checkpoint's part 0 header, one read. A part 0
// whose flush failed before a head named it is a whole checkpoint too
// (engine.OpenAt opens it the same way), so it is found by number even
// though no listing shows it.
func (fsys *FS) ckptOne(ctx context.Context, id string, cno uint64) (ckptPoint, error) {
	e, err := fsys.ckptHead(ctx, id)
	if err != nil {
		return ckptPoint{}, err
	}
	if cno != 0 && (e.missing || cno > e.head.Inode.Cno) {
		// A number past the head kept: another mount may have published
		// it since, so the head is read again before the answer is no (a
		// miss costs one read, as a name missing is looked for in the
		// namespace log first).
		if e, err = fsys.ckptHeadWithin(ctx, id, 0); err != nil {
			return ckptPoint{}, err
		}
	}
	hd := e.head
	if e.missing || cno == 0 || cno > hd.Inode.Cno {
		return ckptPoint{}, errNoCheckpoint
	}
	if e.known && e.pointCno == hd.Inode.Cno {
		for _, p := range e.points {
			if p.cno == cno {
				return p, nil
			}
		}
		return ckptPoint{}, errNoCheckpoint
	}
	if cno == hd.Inode.Cno {
		return pointOf(hd.Inode), nil
	}
	rctx, cancel := context.WithTimeout(ctx, requestBound(fsys.cfg))
	defer cancel()
	name := segment.ObjectName{Cno: cno, Part: 0}
	h, err := segment.ReadHeader(rctx, fsys.st, fsys.prefix(id)+name.String(), name, segment.FileTag(id), hd.Inode.Format)
	if errors.Is(err, staging.ErrNotFound) {
		return ckptPoint{}, errNoCheckpoint
	}
	if err != nil {
		return ckptPoint{}, fmt.Errorf("checkpoint %d of file %s: %w", cno, id, err)
	}
	return pointOf(h.Inode), nil
}

// readChain follows the chain of checkpoints from the head hd of the file
// at prefix (tag), newest first, as engine.File.Checkpoints does, with the
// headers of the next chainReadAhead numbers below the one it needs read
// meanwhile. A checkpoint whose part 0 is gone (the cleaner removed it)
// ends the chain. Each header is checked (segment.ReadHeader: its name, its
// file, a base numbered below it), so the walk ends after at most
// hd.Inode.Cno reads, whatever the objects say.
func readChain(ctx context.Context, st staging.Store, prefix string, tag uint64, hd segment.Head) ([]ckptPoint, error) {
	var out []ckptPoint
	ino := hd.Inode
	if hd.Part0.Inode.Cno == ino.Cno && ino.Cno != 0 {
		// The head carries its part 0 (which may not be stored yet).
		out = append(out, pointOf(hd.Part0.Inode))
		ino = hd.Part0.Base
	}
	r := newHeaderReads(ctx, st, prefix, tag)
	defer r.close()
	for ino.Cno != 0 {
		h, err := r.get(ino.Cno, ino.Format)
		if errors.Is(err, staging.ErrNotFound) && len(out) > 0 {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Base.Cno >= ino.Cno {
			// segment.ReadHeader refuses it; the walk must end regardless.
			return nil, fmt.Errorf("checkpoint %d is built on checkpoint %d: %w", ino.Cno, h.Base.Cno, segment.ErrInvalid)
		}
		out = append(out, pointOf(h.Inode))
		ino = h.Base
	}
	return out, nil
}

// headerReads reads part 0 headers of one file ahead of a walk down its
// chain: at most chainReadAhead at once, each its own goroutine, all
// canceled and waited for by close.
type headerReads struct {
	ctx    context.Context
	cancel context.CancelFunc
	st     staging.Store
	prefix string
	tag    uint64
	wg     sync.WaitGroup
	m      map[uint64]*headerRead
}

type headerRead struct {
	format segment.Format
	cancel context.CancelFunc
	done   chan struct{}
	h      segment.Header
	err    error
}

func newHeaderReads(ctx context.Context, st staging.Store, prefix string, tag uint64) *headerReads {
	ctx, cancel := context.WithCancel(ctx)
	return &headerReads{ctx: ctx, cancel: cancel, st: st, prefix: prefix, tag: tag, m: make(map[uint64]*headerRead)}
}

func (r *headerReads) start(cno uint64, f segment.Format) {
	ctx, cancel := context.WithCancel(r.ctx)
	rd := &headerRead{format: f, cancel: cancel, done: make(chan struct{})}
	r.m[cno] = rd
	r.wg.Go(func() {
		defer close(rd.done)
		name := segment.ObjectName{Cno: cno, Part: 0}
		rd.h, rd.err = segment.ReadHeader(ctx, r.st, r.prefix+name.String(), name, r.tag, f)
	})
}

// get returns the header of checkpoint cno's part 0 (format f), having the
// reads of the numbers just below it started, and the reads above it (the
// walk only goes down) canceled.
func (r *headerReads) get(cno uint64, f segment.Format) (segment.Header, error) {
	for c, rd := range r.m {
		if c > cno || (c == cno && rd.format != f) {
			rd.cancel()
			delete(r.m, c)
		}
	}
	for i := uint64(0); i < chainReadAhead && i < cno; i++ {
		if r.m[cno-i] == nil {
			r.start(cno-i, f)
		}
	}
	rd := r.m[cno]
	delete(r.m, cno)
	defer rd.cancel()
	select {
	case <-rd.done:
		return rd.h, rd.err
	case <-r.ctx.Done():
		return segment.Header{}, r.ctx.Err()
	}
}

func (r *headerReads) close() {
	r.cancel()
	r.wg.Wait()
}
