package nsv2

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Refresh ahead. What a Tree serves from its cache it serves for Config.TTL
// (ns_refresh): a name read or written, and a directory's last whole
// listing, which answers a lookup's miss. Past the TTL, the next use reads
// the store first, and that read is on the caller's path: a create, whose
// kernel looks up the directories of its path (each name once its entry
// timeout, as long as the TTL, is over) and then the new name (a miss),
// waited a GET for each directory and a LIST for the miss about once a TTL
// (three round trips a second on the general link, a tenth of one mount's
// creates).
//
// The refresher is a goroutine of the Tree (started by Open when the TTL is
// set, stopped and waited for by Close) that reads again, before they
// expire, the names and the listings in use (and the root's attributes,
// root.go): used again and again over at
// least half a TTL, the last time within the last refreshUse TTLs, and read
// more than refreshAge of the TTL ago. Uses in one burst (a listing's
// names stat'ed once, ls -l) do not count: reading those again would double
// the cost of every look at a large directory. Each is read
// as a use past the TTL would read it (a GET of the name; a LIST of each
// fragment, up to missListMax keys), and replaces what the cache holds only
// if nothing else replaced it meanwhile. What is served stays at most a TTL
// old, as before: a listing counts from when its LIST was sent, a name from
// when its GET answered, as a foreground read does. A read that fails
// leaves the entry to expire: its next use reads it, as without the
// refresher. Names and directories not used for refreshUse TTLs are dropped
// from the set, so that an idle mount sends nothing.
const (
	// refreshAge: an entry in use is read again once this part of the TTL
	// has passed since it was read, so that the read has the rest of the
	// TTL (a quarter: 250 ms of a 1 s ns_refresh) to land, on a busy host
	// too.
	refreshAgeNum, refreshAgeDen = 3, 4
	// refreshUse: how many TTLs after its last use an entry is kept fresh.
	// Two: the kernel asks for a directory on a path once its entry
	// timeout (one second, as ns_refresh) is over, so a directory a
	// program works in is used about once a TTL.
	refreshUse = 2
	// refreshTicks: passes of the refresher in a TTL.
	refreshTicks = 8
)

// refresher is the goroutine of refreshLoop.
type refresher struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startRefresher starts the refresher, every every.
func (t *Tree) startRefresher(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.refresher = &refresher{cancel: cancel, done: make(chan struct{})}
	go t.refreshLoop(ctx, every, t.refresher.done)
}

// stopRefresher stops the refresher and waits for it (Close).
func (t *Tree) stopRefresher() {
	if t.refresher == nil {
		return
	}
	t.refresher.cancel()
	<-t.refresher.done
}

func (t *Tree) refreshLoop(ctx context.Context, every time.Duration, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.refreshPass(ctx)
		}
	}
}

// useSpan is when a name or a listing was first used, of the uses each
// less than refreshUse TTLs after the one before, and last used.
type useSpan struct {
	first, last time.Time
}

// used is s after a use at now.
func (s useSpan) used(now time.Time, ttl time.Duration) useSpan {
	if s.last.IsZero() || now.Sub(s.last) >= ttl*refreshUse {
		return useSpan{first: now, last: now}
	}
	return useSpan{first: s.first, last: now}
}

// inUse says whether s counts as in use at now.
func (s useSpan) inUse(now time.Time, ttl time.Duration) bool {
	return now.Sub(s.last) < ttl*refreshUse && s.last.Sub(s.first) >= ttl/2
}

// useLocked marks name e used now (mu held).
func (t *Tree) useLocked(e *entry) {
	if t.ttl > 0 {
		k := nameKey{e.dir, e.name}
		t.hot[k] = t.hot[k].used(t.clock(), t.ttl)
	}
}

// useListLocked marks dir's listing used now (mu held).
func (t *Tree) useListLocked(dir namespace.Ino) {
	if t.ttl > 0 {
		t.hotDirs[dir] = t.hotDirs[dir].used(t.clock(), t.ttl)
	}
}

// refreshPass renews the create leases in use that are due (lease.go), then
// reads again what is in use and about to expire, up to t.parallel
// requests at once, and returns when every read has.
func (t *Tree) refreshPass(ctx context.Context) {
	t.renewAhead(ctx)
	if t.ttl <= 0 {
		return
	}
	now := t.clock()
	age := t.ttl * refreshAgeNum / refreshAgeDen
	use := t.ttl * refreshUse
	type nameJob struct {
		e    *entry
		etag string
		gen  uint64
	}
	var names []nameJob
	var dirs []namespace.Ino
	t.mu.Lock()
	for k, u := range t.hot {
		e := t.names[k]
		if now.Sub(u.last) >= use || e == nil || e.bound == nil {
			delete(t.hot, k)
			continue
		}
		if !u.inUse(now, t.ttl) {
			continue
		}
		// Only a current entry is read ahead: one made stale (a Refresh,
		// or another name of a change of several names read) must be
		// read at its use, after whatever made it stale.
		if e.gen == t.gen && e.etag != "" && now.Sub(e.learned) >= age {
			names = append(names, nameJob{e: e, etag: e.etag, gen: e.gen})
		}
	}
	for dir, u := range t.hotDirs {
		l := t.lists[dir]
		if now.Sub(u.last) >= use || l == nil || t.large[dir] {
			delete(t.hotDirs, dir)
			continue
		}
		if !u.inUse(now, t.ttl) {
			continue
		}
		if l.gen == t.gen && now.Sub(l.began) >= age {
			dirs = append(dirs, dir)
		}
	}
	rootETag, rootGen, rootDue := t.rootDueLocked(now, age)
	t.mu.Unlock()
	sem := make(chan struct{}, t.parallel)
	var wg sync.WaitGroup
	run := func(f func()) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f()
		}()
	}
	for _, j := range names {
		run(func() { t.refreshName(ctx, j.e, j.etag, j.gen) })
	}
	for _, dir := range dirs {
		run(func() { t.refreshList(ctx, dir) })
	}
	if rootDue {
		run(func() { t.refreshRoot(ctx, rootETag, rootGen) }) // root.go
	}
	wg.Wait()
}

// refreshName reads name e again, and caches what it read if e is still the
// entry of its name, as it was (etag, gen) when the pass chose it: a write
// of this mount, or a read, since then holds what is newer or as new.
func (t *Tree) refreshName(ctx context.Context, e *entry, etag string, gen uint64) {
	r, err := t.p.Resolve(ctx, e.dir, e.frags, e.name)
	if err != nil {
		t.log.Debug("namespace v2: a name read ahead failed; its next use reads it", zap.String("name", e.name), zap.Error(err))
		return
	}
	t.mu.Lock()
	if t.names[nameKey{e.dir, e.name}] != e || e.etag != etag || e.gen != gen || t.gen != gen {
		t.mu.Unlock()
		return
	}
	t.learnResolvedLocked(e.dir, e.frags, e.name, r)
	t.mu.Unlock()
}

// refreshList lists dir again for lookups' misses (as absent does).
func (t *Tree) refreshList(ctx context.Context, dir namespace.Ino) {
	frags, err := t.dirFrags(dir)
	if err != nil {
		return
	}
	t.mu.Lock()
	gen := t.gen
	t.mu.Unlock()
	began := t.clock()
	keys, whole, err := t.listFragsUpTo(ctx, dir, frags, missListMax)
	switch {
	case err != nil:
		t.log.Debug("namespace v2: a listing read ahead failed; the next miss lists", zap.Uint64("dir", uint64(dir)), zap.Error(err))
	case !whole:
		t.mu.Lock()
		t.large[dir] = true
		t.mu.Unlock()
	default:
		t.noteList(dir, gen, began, keys)
	}
}
