package nsv2

import (
	"context"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Walk ahead. A program that walks a tree (os.walk, find, du, ls -R) lists
// one directory after another, and each listing of names another mount
// made waits a LIST and then a round of GETs, one a name not cached: a
// walk of a checkpoint of N ranks, a directory each, took N of those
// rounds one after the other (bench-ranks: 1.94 s at 8 mounts, growing
// with N). When a listing of a directory follows one of its parent, within
// the TTL, the Tree takes it for a walk and lists the parent's other
// subdirectories in the background (up to walkAheadAt at once, walkAheadMax
// a parent), reading the names of each it does not hold; the walk's own
// listing of each then sends its LIST and finds the names cached with the
// ETags it lists, or waits for that directory's read ahead in flight first.
// What a listing answers is unchanged: its own LIST, and names read within
// the TTL (a listing read ahead counts its names as read when it ends, as
// a listing does). A read ahead is a listing's cost spent early; a walk
// that stops leaves at most walkAheadMax directories read for nothing.
const (
	walkAheadAt  = 4
	walkAheadMax = 64
)

// walkState is what the walk ahead knows of a directory's last listing.
type walkState struct {
	at      time.Time       // when that listing ended
	subdirs []namespace.Ino // its subdirectories, in listing order
	ahead   bool            // their read ahead is started
}

// startBackground makes the context of the Tree's background work, which
// Close cancels and waits for.
func (t *Tree) startBackground() {
	t.bgCtx, t.bgCancel = context.WithCancel(context.Background())
}

// stopBackground cancels the walk ahead and waits for it (Close).
func (t *Tree) stopBackground() {
	t.bgCancel()
	t.bg.Wait()
}

// waitAhead waits for a read ahead of dir in flight, if any.
func (t *Tree) waitAhead(ctx context.Context, dir namespace.Ino) {
	t.mu.Lock()
	ch := t.aheadOf[dir]
	t.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// noteWalk records a listing of dir that ended at now and found ents, and,
// when it follows a listing of dir's parent within the TTL, starts the read
// ahead of the parent's other subdirectories. ahead says this listing is
// itself a read ahead (which starts none).
func (t *Tree) noteWalk(dir namespace.Ino, now time.Time, ents []namespace.Dirent, ahead bool) {
	if t.walkAt <= 0 {
		return
	}
	var subs []namespace.Ino
	for _, d := range ents {
		if d.Kind == namespace.KindDir && len(subs) < walkAheadMax {
			subs = append(subs, d.Ino)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if len(t.walks) >= walkKeep {
		for d, w := range t.walks {
			if now.Sub(w.at) >= max(t.ttl, walkAheadWithin) {
				delete(t.walks, d)
			}
		}
	}
	t.walks[dir] = &walkState{at: now, subdirs: subs}
	if ahead || dir == namespace.RootIno {
		return
	}
	e := t.inos[dir]
	if e == nil {
		return
	}
	p := t.walks[e.dir]
	if p == nil || p.ahead || t.ttl > 0 && now.Sub(p.at) >= t.ttl || t.ttl <= 0 && now.Sub(p.at) >= walkAheadWithin {
		return
	}
	p.ahead = true
	var todo []namespace.Ino
	for _, s := range p.subdirs {
		if s != dir && t.aheadOf[s] == nil {
			if w := t.walks[s]; w != nil && now.Sub(w.at) < max(t.ttl, walkAheadWithin) {
				continue // listed already
			}
			todo = append(todo, s)
			t.aheadOf[s] = make(chan struct{})
		}
	}
	if len(todo) == 0 {
		return
	}
	t.bg.Add(1)
	go t.walkAhead(todo)
}

// walkKeep is how many directories' listings the walk ahead keeps before it
// drops those too old to start one.
const walkKeep = 4096

// walkAheadWithin bounds how long after a parent's listing a child's counts
// as a walk when the Tree has no TTL.
const walkAheadWithin = time.Second

// walkAhead lists dirs, walkAt at once.
func (t *Tree) walkAhead(dirs []namespace.Ino) {
	defer t.bg.Done()
	sem := make(chan struct{}, t.walkAt)
	var wg sync.WaitGroup
	for _, d := range dirs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if t.bgCtx.Err() == nil {
				_, _ = t.listDir(t.bgCtx, d, true) // a failure: the walk's own listing reads
			}
			t.mu.Lock()
			close(t.aheadOf[d])
			delete(t.aheadOf, d)
			t.mu.Unlock()
		}()
	}
	wg.Wait()
}
