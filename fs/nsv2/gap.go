package nsv2

import "time"

// TrimGrace is how long the cleaner keeps what a mount may still hold in
// its cache of names (docs/namespace-v2.md §5): a tombstone, a resolved
// change's decision and op list, an idle lease are deleted once older than
// this (Trim). v1 keeps its log's trimmed entries as long
// (fs/namespace: Options.TrimGrace).
const TrimGrace = 10 * time.Minute

// gapState is when a Tree last served a call, for the rule of section 5: a
// mount away for longer than TrimGrace holds dentries, ETags and listings
// whose objects the cleaner may have deleted since, so its cache is dropped
// whole at its first call after such a gap, and everything is read again.
// Nothing it acknowledged depended on its cache: every change it made was
// stored before it returned. The gap is measured on the mount's own
// monotonic clock (Config.Clock), between the starts of two calls: a mount
// that spoke to the store less recently than its last call is closer to
// the store than that, never further.
type gapState struct {
	max   time.Duration // Config.TrimGrace; 0: TrimGrace
	last  time.Time     // the start of the last call; zero before the first
	drops int           // caches dropped, for tests and logs
}

// afterGapLocked notes a call starting now and drops the cache when the
// last call started more than the grace ago. mu held.
func (t *Tree) afterGapLocked() {
	now := t.clock()
	g := &t.gap
	max := g.max
	if max <= 0 {
		max = TrimGrace
	}
	if !g.last.IsZero() && now.Sub(g.last) > max {
		t.dropCacheLocked()
		g.drops++
	}
	g.last = now
}

// dropCacheLocked forgets every name read: tombstones and listings go,
// and every bound name is stale (read again before it is used). Where each
// node's name is stays known, as Refresh keeps it, so that GetNode of a
// node open on this mount reads its name again rather than losing it; so
// do the orphans this mount's handles still use. mu held.
func (t *Tree) dropCacheLocked() {
	t.gen++
	for k, e := range t.names {
		if e.bound == nil {
			delete(t.names, k)
		}
	}
	clear(t.lists)
	clear(t.large)
}

// CacheDrops is how many times the Tree dropped its cache after a gap.
func (t *Tree) CacheDrops() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gap.drops
}
