package blockmap

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// ObjectLoader is the read path's Loader: it fetches nodes from the objects
// of one file. The first time a node of object X is needed it reads X's
// header and X's whole meta region, in one round trip when X's tail (meta
// region, summary, and a stream object's header) is at most the loader's
// guess (segment.ReadHeaderMeta: one suffix request for a stream object),
// in two otherwise, and keeps the region, so a cold walk fetches each
// object's index nodes once: the nodes it needs later, under nodes already
// loaded, come from that fetch. The guess starts at tailGuess and grows to
// the longest tail met, up to segment.MaxTailGuess: a file's objects are
// mostly alike (a writer's pieces), and a round trip costs more than what
// a guess too large fetches in vain.
// Kept regions are evicted least recently used first when their bytes pass
// the budget. Concurrent loads from one object share one fetch.
//
// An ObjectLoader is safe for concurrent use.
type ObjectLoader struct {
	st      staging.Store
	prefix  string
	fileTag uint64
	format  segment.Format
	budget  int64
	// resolve, when set, says where each object is (a file copied by
	// reference reads objects of other files); prefix and fileTag are then
	// the file's own, for messages.
	resolve Resolver

	mu sync.Mutex
	// cache holds the kept regions. GUARDED_BY(mu).
	// INVARIANT: cached == the sum of len(meta) over cache, and
	// cached <= budget; lru holds exactly the entries of cache, most
	// recently used at the front.
	cache    map[segment.ObjectName]*metaRegion
	lru      list.List
	cached   int64
	inflight map[segment.ObjectName]*fetch // GUARDED_BY(mu)
	guess    int64                         // the tail asked for with a header; GUARDED_BY(mu)
	stats    LoaderStats                   // GUARDED_BY(mu)
	// pinned are regions given from memory (Pin): served before the cache,
	// never evicted, never fetched. GUARDED_BY(mu).
	pinned map[segment.ObjectName]*metaRegion
}

// LoaderStats counts an ObjectLoader's work.
type LoaderStats struct {
	Loads         int64 // LoadNode calls that returned a node
	HeaderReads   int64 // headers read from the store
	MetaReads     int64 // meta regions read from the store (with the header or after it)
	MetaRequests  int64 // of those, read by a request of their own (the tail was past the guess)
	Hits          int64 // loads served from a kept region (or a shared fetch)
	Evictions     int64 // regions dropped for the budget
	CachedObjects int   // regions kept now
	CachedBytes   int64 // bytes kept now
}

// metaRegion is the meta region of one object.
type metaRegion struct {
	name   segment.ObjectName
	header segment.Header
	meta   []byte
	elem   *list.Element // in lru; nil when not kept
}

// fetch is one fetch of an object's region in flight; done is closed once
// region or err is set.
type fetch struct {
	done   chan struct{}
	region *metaRegion
	err    error
}

// NewObjectLoader loads the nodes of the file tagged fileTag, laid out as
// format f, whose objects live at prefix + name.String(). budget bounds the
// bytes of meta regions kept (0 keeps none).
func NewObjectLoader(st staging.Store, prefix string, fileTag uint64, f segment.Format, budget int64) *ObjectLoader {
	return &ObjectLoader{
		st: st, prefix: prefix, fileTag: fileTag, format: f, budget: max(budget, 0),
		cache:    map[segment.ObjectName]*metaRegion{},
		inflight: map[segment.ObjectName]*fetch{},
		guess:    tailGuess,
		pinned:   map[segment.ObjectName]*metaRegion{},
	}
}

// Format is the layout the loader reads objects as, fixed at its making.
func (l *ObjectLoader) Format() segment.Format { return l.format }

// Resolver says which key holds the object name of a file's block map and
// the tag that object must carry: a file copied by reference points into the
// objects of the files it was copied from (segment.Lineage).
type Resolver func(ctx context.Context, name segment.ObjectName) (key string, fileTag uint64, err error)

// NewResolvingLoader is NewObjectLoader for a file whose objects resolve
// finds; prefix and fileTag are the file's own (they name it in errors).
func NewResolvingLoader(st staging.Store, prefix string, fileTag uint64, resolve Resolver, f segment.Format, budget int64) *ObjectLoader {
	l := NewObjectLoader(st, prefix, fileTag, f, budget)
	l.resolve = resolve
	return l
}

// Pin serves the nodes of object name from meta, the object's meta region
// (h.MetaBlocks × h.MetaBlockSize bytes) held in memory by the caller, until
// Unpin: an object that may not be in the store yet (a head carries a copy
// of its checkpoint's part 0) is read without a request. The caller has
// verified h and meta as it would an object read from the store.
func (l *ObjectLoader) Pin(name segment.ObjectName, h segment.Header, meta []byte) error {
	if int64(len(meta)) != int64(h.MetaBlocks)*int64(h.MetaBlockSize) {
		return fmt.Errorf("pin meta blocks of %s: %w: %d bytes for %d blocks of %d", l.key(name),
			ErrInvalidArgument, len(meta), h.MetaBlocks, h.MetaBlockSize)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pinned[name] = &metaRegion{name: name, header: h, meta: meta}
	return nil
}

// Unpin stops serving name from memory (Pin); later loads fetch it.
func (l *ObjectLoader) Unpin(name segment.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pinned, name)
}

var _ Loader = (*ObjectLoader)(nil)

// LoadNode returns the meta block ref points at. The bytes are shared with
// the kept region: the caller must not change them.
func (l *ObjectLoader) LoadNode(ctx context.Context, ref segment.Ptr) ([]byte, error) {
	r, err := l.region(ctx, ref.Object())
	if err != nil {
		return nil, err
	}
	if ref.Slot >= r.header.MetaBlocks {
		return nil, corrupt(ref, "meta slot %d past the %d meta blocks of object %s", ref.Slot, r.header.MetaBlocks, l.key(r.name))
	}
	size := int(r.header.MetaBlockSize)
	off := int(ref.Slot) * size
	l.mu.Lock()
	l.stats.Loads++
	l.mu.Unlock()
	return r.meta[off : off+size : off+size], nil
}

// Preload fetches and keeps the meta region of object name, as the first
// load of one of its nodes would, for a walk that is expected to need it.
func (l *ObjectLoader) Preload(ctx context.Context, name segment.ObjectName) error {
	_, err := l.region(ctx, name)
	return err
}

func (l *ObjectLoader) key(name segment.ObjectName) string { return l.prefix + name.String() }

// region returns the meta region of name: kept, being fetched by another
// caller, or fetched now.
func (l *ObjectLoader) region(ctx context.Context, name segment.ObjectName) (*metaRegion, error) {
	for {
		l.mu.Lock()
		if r, ok := l.pinned[name]; ok {
			l.stats.Hits++
			l.mu.Unlock()
			return r, nil
		}
		if r, ok := l.cache[name]; ok {
			l.lru.MoveToFront(r.elem)
			l.stats.Hits++
			l.mu.Unlock()
			return r, nil
		}
		if f, ok := l.inflight[name]; ok {
			l.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("load meta blocks of %s: %w", l.key(name), ctx.Err())
			}
			if f.err != nil && isContextErr(f.err) && ctx.Err() == nil {
				continue // the fetching caller gave up; fetch again for this one
			}
			if f.err == nil {
				l.mu.Lock()
				l.stats.Hits++
				l.mu.Unlock()
			}
			return f.region, f.err
		}
		f := &fetch{done: make(chan struct{})}
		l.inflight[name] = f
		l.mu.Unlock()

		f.region, f.err = l.fetch(ctx, name)

		l.mu.Lock()
		delete(l.inflight, name)
		if f.err == nil {
			l.keep(f.region)
		}
		l.mu.Unlock()
		close(f.done)
		return f.region, f.err
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// fetch reads the header and the meta region of name.
func (l *ObjectLoader) fetch(ctx context.Context, name segment.ObjectName) (*metaRegion, error) {
	key, tag := l.key(name), l.fileTag
	if l.resolve != nil {
		var err error
		if key, tag, err = l.resolve(ctx, name); err != nil {
			return nil, fmt.Errorf("load block-map nodes of %s: %w", l.key(name), err)
		}
	}
	l.mu.Lock()
	guess := l.guess
	l.mu.Unlock()
	h, meta, need, err := segment.ReadHeaderMeta(ctx, l.st, key, name, tag, l.format, guess)
	l.mu.Lock()
	l.stats.HeaderReads++
	if err == nil && h.MetaBlocks > 0 {
		l.stats.MetaReads++
		if need > max(guess, segment.HeaderSize) {
			l.stats.MetaRequests++
		}
	}
	if err == nil && need > l.guess && need <= segment.MaxTailGuess {
		l.guess = need
	}
	l.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("load block-map nodes of %s: %w", key, err)
	}
	return &metaRegion{name: name, header: h, meta: meta}, nil
}

// tailGuess is the tail a loader first asks for with a header: the tail of
// the mount's default pieces (48 MiB of 64 KiB blocks, 41 KiB) with room
// to spare, under 1 ms at one request's share of the general link.
const tailGuess = 64 << 10

// keep adds r to the cache, evicting least recently used regions to stay in
// budget; a region larger than the whole budget is not kept.
func (l *ObjectLoader) keep(r *metaRegion) {
	size := int64(len(r.meta))
	if size > l.budget {
		return
	}
	for l.cached+size > l.budget {
		old := l.lru.Back().Value.(*metaRegion)
		l.drop(old)
		l.stats.Evictions++
	}
	r.elem = l.lru.PushFront(r)
	l.cache[r.name] = r
	l.cached += size
}

func (l *ObjectLoader) drop(r *metaRegion) {
	l.lru.Remove(r.elem)
	r.elem = nil
	delete(l.cache, r.name)
	l.cached -= int64(len(r.meta))
}

// Forget drops the kept region of name, if any (for instance after the
// object was deleted or replaced by a failed attempt's retry).
func (l *ObjectLoader) Forget(name segment.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.cache[name]; ok {
		l.drop(r)
	}
}

// Clear drops every kept region (not the pinned ones): the names may stand
// for other objects now.
func (l *ObjectLoader) Clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.cache {
		l.drop(r)
	}
}

// Stats returns the loader's counters.
func (l *ObjectLoader) Stats() LoaderStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.CachedObjects = len(l.cache)
	s.CachedBytes = l.cached
	return s
}
