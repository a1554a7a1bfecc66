package nsv2

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// Tree is namespace v2 as one mount sees it (docs/namespace-v2.md, sections
// 3 to 5, steps 3 and 4 of section 10): namespace.Names over the
// primitives, for the changes of one name and those of several: rename,
// exchange, rmdir, link, and directories moved across directories.
// It keeps a cache of the dentries it has read or
// written, not the whole tree:
//
//   - Lookup serves a name cached since the last Refresh and less than
//     Config.TTL ago; a name cached bound before either it reads again
//     (one GET); a miss it answers from the directory's last whole listing
//     while that is younger than the TTL, else it lists the directory or
//     reads the dentry, so that a name another mount made is seen at most
//     a TTL after that mount's create returned. A name found absent is
//     never cached for Lookup. The refresher (refresh.go), a goroutine of
//     the Tree, reads the names and listings in use again before their TTL
//     is over, so that the reads past the TTL are not on a create's path.
//   - ReadDir lists the directory's fragments (one LIST each, sent at once)
//     and reads the dentries whose ETag the cache does not hold. The
//     digests of section 4, which save those reads for names other mounts
//     bound, are an optimisation left to a later step: without them a
//     listing is right, and costs a GET per name not cached. A listing that
//     follows one of its parent's has the parent's other subdirectories
//     read ahead (walkahead.go), so that a walk pays those GETs at once.
//   - Every change is one conditional PUT of the name's dentry (two for an
//     unlink of a file: its orphan record first), stored before it returns;
//     a lost answer is resolved by the primitives' read-back.
//
// The changes of several names are in files of their own: rename,
// exchange and rmdir (step 4, treemulti.go), every name added to a
// directory other than the root added under a create lease (lease.go), a
// directory moved across directories through the moves log (moves.go),
// and link, which makes a node of several names whose attributes and
// count of names are its inode object's (inode.go). The root has no name:
// its attributes are an object of their own, ns2/root, read and changed
// as a name's (root.go); its fragment count is Config's. A directory's
// fragment count is its parent's when made, and set on an empty one with
// user.ckptfs.fragments under its create leases (frags.go).
//
// What is not here yet, and what it answers instead (never a silent wrong
// answer):
//
//   - A directory's Nlink is 1 and its times are those it was made or set
//     with (section 4 gives it the newest Last-Modified of its names as the
//     last listing saw it: a later step).
//
// Orphans (section 5): an unlink of a file, or a rename over one, stores
// ns2/orphan/<file-id> before the change. A record is an orphan's when its
// name no longer binds its node. Since renames move names, a record left by
// a change that did not land must not outlive the file's leaving its name
// another way: an unlink whose tombstone is refused deletes its record when
// the name no longer binds the file, and a rename of a file deletes a
// record that names the name it moves the file from (one GET). What is
// left: a mount that dies between its record and its refused tombstone
// while another mount renames the file leaves a record whose dentry says
// nothing of its change; the cleaner's Index (index.go) then lists every
// dentry, finds the file named, and deletes the record as stale.
// Named answers for files whose name this Tree has seen or whose orphan
// record exists; of any other file it cannot tell without listing every
// dentry, which the cleaner's Index does and a mount does not, and says so
// with an error rather than guess.
//
// Locking: mu guards the cache and is never held across a request to the
// store; inoMu guards the inode batch and is held across its claim, which
// only a create waits for.
type Tree struct {
	p         *Names
	st        staging.Store
	root      string
	mount     string
	log       *zap.Logger
	now       func() time.Time
	rootFrags uint32
	rootDef   *Attrs // the root's attributes while none are stored (root.go)
	parallel  int

	inoMu     sync.Mutex
	batch     uint64        // GUARDED_BY(inoMu): the batch inos come from
	nextIno   namespace.Ino // GUARDED_BY(inoMu): 0 when no batch is held
	endIno    namespace.Ino // GUARDED_BY(inoMu): past the batch's last
	nextBatch uint64        // GUARDED_BY(inoMu): where the next claim starts

	clock func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	ttl   time.Duration // Config.TTL

	leaseMu sync.Mutex
	leases  map[namespace.Ino]*leaseState // GUARDED_BY(leaseMu): this mount's create leases

	mu      sync.Mutex
	gen     uint64                       // GUARDED_BY(mu): Refresh's count; older entries are stale
	names   map[nameKey]*entry           // GUARDED_BY(mu)
	inos    map[namespace.Ino]*entry     // GUARDED_BY(mu): the entry of each node's name
	orphans map[namespace.Ino]orphanNode // GUARDED_BY(mu): files with no name, seen here
	byFile  map[string]namespace.Ino     // GUARDED_BY(mu): file id -> ino, of entries and orphans
	lists   map[namespace.Ino]*dirList   // GUARDED_BY(mu): each directory's last whole listing
	large   map[namespace.Ino]bool       // GUARDED_BY(mu): directories a miss does not list
	hot     map[nameKey]useSpan          // GUARDED_BY(mu): names used lately (refresh.go)
	hotDirs map[namespace.Ino]useSpan    // GUARDED_BY(mu): listings used lately
	rootSt  rootState                    // GUARDED_BY(mu): the root's attributes (root.go)
	closed  bool                         // GUARDED_BY(mu)
	gap     gapState                     // GUARDED_BY(mu): gap.go
	calls   sync.WaitGroup               // calls in flight, for Close

	tidy tidier // resolutions of committed changes, after their calls (treemulti.go)

	refresher *refresher // nil: none (no TTL, or Config.RefreshEvery < 0)

	// The walk ahead (walkahead.go): its goroutines, counted in bg and
	// ended by bgCancel at Close.
	walkAt   int                             // directories read ahead at once; 0: none
	walks    map[namespace.Ino]*walkState    // GUARDED_BY(mu): each directory's last listing
	aheadOf  map[namespace.Ino]chan struct{} // GUARDED_BY(mu): read aheads in flight, closed when done
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

// nameKey is a name in a directory.
type nameKey struct {
	dir  namespace.Ino
	name string
}

// entry is a cached dentry: the name, its directory's fragment count, and
// the dentry as last read or written. INVARIANT: bound != nil iff
// inos[bound.Ino] is this entry.
type entry struct {
	dir   namespace.Ino
	frags uint32
	name  string
	// etag is the dentry's ETag, "" when no write may be conditioned on it
	// (the dentry was locked by a change of several names when read).
	etag  string
	bound *Binding // nil: a tombstone (kept for a listing's ETags)
	node  *Inode   // the inode object, when bound has no attributes
	gen   uint64
	// learned is when this entry was read or written (Config.Clock): it
	// is fresh for Config.TTL after.
	learned time.Time
	// change is the change of several names whose dentry this is (a lock
	// or its resolution; "" otherwise): reading another name of the same
	// change does not make this one stale, it shows the change already.
	change string
}

// orphanNode is a file whose last name went while this Tree knew it: its
// node (Nlink 0) and attributes, which only this mount's handles use.
type orphanNode struct {
	node  namespace.Node
	attrs *Attrs
}

// Errors a caller decides on, besides namespace's sentinels.
var (
	// ErrClosed: the Tree is closed.
	ErrClosed = errors.New("namespace closed")
)

// FragmentsXattr is the attribute that sets a directory's fragment count
// (section 3; frags.go).
const FragmentsXattr = "user.ckptfs.fragments"

// Config is what a Tree is made with.
type Config struct {
	Store staging.Store
	// Root is the mount root under which ns2/ lives.
	Root string
	// Mount is this life of the mount: 32 lower-case hex digits
	// (namespace.NewFileID), fresh each time, as a batch claim's owner.
	Mount string
	// Log: nil is zap.NewNop().
	Log *zap.Logger
	// RootFrags is the root's fragment count (a power of two, 1 to
	// MaxFrags; 0 is 1).
	RootFrags uint32
	// RootMode and RootOwner are the root's attributes while the volume
	// stores none (root.go; RootMode 0 is 0o755).
	RootMode  uint32
	RootOwner namespace.Owner
	// Now is the clock of the times of changes; nil is time.Now. StoreNow
	// is the store's clock as the mount knows it (see Names); nil is
	// time.Now.
	Now      func() time.Time
	StoreNow func() time.Time
	// FirstBatch is the inode batch the first claim tries; 0 is a random
	// one in [2^40, 2^43), so that mounts rarely try one another's batch
	// (each try costs a PUT) and inos stay under 2^63 and above every v1
	// ino a volume upgraded from v1 is likely to hold.
	FirstBatch uint64
	// Parallel bounds the dentries a listing reads at once (0 is 64).
	Parallel int
	// Clock times the create leases (lease.go): this machine's monotonic
	// clock, never compared with another's; nil is time.Now. Sleep waits
	// between a remover's reads of a lease; nil waits d or until ctx ends.
	// Tests give both a clock that Sleep advances.
	Clock func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// TTL is how long a name read or written stays fresh in the cache (a
	// lookup of it sends nothing): the longest this mount may show a name
	// another mount has changed since, as v1's ns_refresh bounds its log's
	// lag. 0: until the next Refresh. The mount gives ns_refresh, and
	// calls no periodic Refresh (whose marks would make every lookup of a
	// listing's names read them again, one at a time, when a tick came in
	// between).
	TTL time.Duration
	// TrimGrace is the cleaner's (0: TrimGrace): after a gap longer than
	// this between two calls the cache is dropped whole (gap.go).
	TrimGrace time.Duration
	// RefreshEvery is how often the refresher (refresh.go) reads again the
	// names and listings in use that are about to expire: 0 is TTL/8;
	// negative, no refresher (tests that run its passes themselves). No
	// refresher runs without a TTL.
	RefreshEvery time.Duration
	// WalkAhead is how many subdirectories the walk ahead (walkahead.go)
	// lists at once: 0 is 4; negative, no walk ahead.
	WalkAhead int
}

// Open makes the Tree of cfg. It sends no request: a batch of inos is
// claimed at the first create.
func Open(cfg Config) (*Tree, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("open namespace v2: no store: %w", namespace.ErrInvalid)
	}
	if !ValidID(cfg.Mount) {
		return nil, fmt.Errorf("open namespace v2: mount id %q: %w", cfg.Mount, namespace.ErrInvalid)
	}
	if cfg.RootFrags == 0 {
		cfg.RootFrags = 1
	}
	if !ValidFrags(cfg.RootFrags) {
		return nil, fmt.Errorf("open namespace v2: root of %d fragments: %w", cfg.RootFrags, namespace.ErrInvalid)
	}
	if cfg.RootMode == 0 {
		cfg.RootMode = 0o755
	}
	if cfg.RootMode&^namespace.ModeMask != 0 {
		return nil, fmt.Errorf("open namespace v2: root mode %o: %w", cfg.RootMode, namespace.ErrInvalid)
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FirstBatch == 0 {
		cfg.FirstBatch = 1<<40 + rand.Uint64N(7<<40)
	}
	if cfg.FirstBatch > maxBatch {
		return nil, fmt.Errorf("open namespace v2: first batch %d: %w", cfg.FirstBatch, namespace.ErrInvalid)
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 64
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	t0 := cfg.Now().UnixNano()
	t := &Tree{
		p: New(cfg.Store, cfg.Root, cfg.StoreNow), st: cfg.Store, root: cfg.Root, mount: cfg.Mount,
		log: cfg.Log, now: cfg.Now, rootFrags: cfg.RootFrags, parallel: cfg.Parallel,
		rootDef:   &Attrs{Mode: cfg.RootMode, Uid: cfg.RootOwner.Uid, Gid: cfg.RootOwner.Gid, Atime: t0, Mtime: t0, Ctime: t0},
		nextBatch: cfg.FirstBatch,
		clock:     cfg.Clock,
		ttl:       cfg.TTL,
		sleep:     cfg.Sleep,
		leases:    map[namespace.Ino]*leaseState{},
		names:     map[nameKey]*entry{},
		inos:      map[namespace.Ino]*entry{},
		orphans:   map[namespace.Ino]orphanNode{},
		byFile:    map[string]namespace.Ino{},
		lists:     map[namespace.Ino]*dirList{},
		large:     map[namespace.Ino]bool{},
		gap:       gapState{max: cfg.TrimGrace},
		hot:       map[nameKey]useSpan{},
		hotDirs:   map[namespace.Ino]useSpan{},
		walks:     map[namespace.Ino]*walkState{},
		aheadOf:   map[namespace.Ino]chan struct{}{},
	}
	switch {
	case cfg.WalkAhead == 0:
		t.walkAt = walkAheadAt
	case cfg.WalkAhead > 0:
		t.walkAt = cfg.WalkAhead
	}
	t.startBackground()
	if cfg.TTL > 0 && cfg.RefreshEvery >= 0 {
		every := cfg.RefreshEvery
		if every == 0 {
			every = max(cfg.TTL/refreshTicks, time.Millisecond)
		}
		t.startRefresher(every)
	}
	return t, nil
}

var _ namespace.Names = (*Tree)(nil)

// enter counts a call in flight, or refuses it once the Tree is closed.
func (t *Tree) enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.afterGapLocked()
	t.calls.Add(1)
	return nil
}

// Close refuses new calls, waits for those in flight and for the tidies of
// their changes (each bounded: a lock a tidy leaves is resolved by its
// readers, as a killed mount's), stops the refresher (refresh.go) and the
// walk ahead (walkahead.go) and waits for them, and deletes this mount's
// create leases (so that no remover waits for them to run out).
func (t *Tree) Close() error {
	t.mu.Lock()
	was := t.closed
	t.closed = true
	t.mu.Unlock()
	t.calls.Wait()
	t.tidyWait()
	if !was {
		t.stopRefresher()
		t.stopBackground()
		t.dropLeases(context.Background())
	}
	return nil
}

// Refresh makes every cached name stale: the reads after it read the store
// for each name they use (its contract in namespace.Names). It keeps where
// each node's name is, so that GetNode of a node seen before reads it again.
func (t *Tree) Refresh(context.Context) error {
	t.mu.Lock()
	t.gen++
	t.mu.Unlock()
	return nil
}

// newID is a fresh change or file id.
func newID() string { return namespace.NewFileID() }

// dirFrags is the fragment count of directory dir, which the Tree must know
// (the root, or a directory it has seen).
func (t *Tree) dirFrags(dir namespace.Ino) (uint32, error) {
	if dir == namespace.RootIno {
		return t.rootFrags, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.inos[dir]
	switch {
	case e == nil:
		if _, ok := t.orphans[dir]; ok {
			return 0, fmt.Errorf("node %d: %w", dir, namespace.ErrNotDir)
		}
		return 0, fmt.Errorf("directory %d: not seen by this mount: %w", dir, namespace.ErrNotExist)
	case e.bound.Kind != namespace.KindDir:
		return 0, fmt.Errorf("node %d: %w", dir, namespace.ErrNotDir)
	}
	return e.bound.Frags, nil
}

// learnLocked caches what name holds: d (nil: no object) with etag, read or
// written now. It returns the entry (nil when there is no object). locked
// says the ETag is a lock's, on which no write may be conditioned.
func (t *Tree) learnLocked(dir namespace.Ino, frags uint32, name string, bound *Binding, etag string, locked bool) *entry {
	k := nameKey{dir, name}
	if old := t.names[k]; old != nil && old.bound != nil && t.inos[old.bound.Ino] == old {
		delete(t.inos, old.bound.Ino)
		if old.bound.Node != nil && old.bound.Node.FileID != "" && (bound == nil || bound.Ino != old.bound.Ino) {
			t.gone(old)
		}
	}
	if etag == "" && bound == nil {
		delete(t.names, k)
		return nil
	}
	if locked {
		etag = ""
	}
	e := &entry{dir: dir, frags: frags, name: name, etag: etag, bound: bound, gen: t.gen, learned: t.clock()}
	t.names[k] = e
	if bound != nil {
		t.inos[bound.Ino] = e
		if bound.Node != nil && bound.Node.FileID != "" {
			t.byFile[bound.Node.FileID] = bound.Ino
		}
	}
	return e
}

// gone records that e's file lost its name: it becomes an orphan here, so
// that GetNode of it keeps answering for the handles open on it until
// Forget (v1 keeps an orphan the same way).
func (t *Tree) gone(e *entry) {
	n := nodeOf(e.dir, e.bound, nil)
	n.Nlink = 0
	t.orphans[n.Ino] = orphanNode{node: n, attrs: e.bound.Node}
	t.byFile[n.FileID] = n.Ino
}

// learn caches a Resolved read of name.
func (t *Tree) learn(dir namespace.Ino, frags uint32, name string, r Resolved) *entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.learnResolvedLocked(dir, frags, name, r)
}

// learnResolvedLocked is learn with mu held.
func (t *Tree) learnResolvedLocked(dir namespace.Ino, frags uint32, name string, r Resolved) *entry {
	locked := r.Pending || r.Dentry != nil && r.Dentry.Lock != nil
	// A name of a change of several names: what this mount cached of the
	// change's other names is read again before it is used, so that it
	// never shows one side of the change (section 3, "Atomic to every
	// reader").
	var ops []Op
	change := ""
	if r.Decision != nil {
		ops, change = r.Decision.Ops, r.Decision.Tx
	} else if r.Dentry != nil && r.Dentry.Lock == nil && len(r.Dentry.Ops) > 0 {
		ops, change = r.Dentry.Ops, r.Dentry.Change
	}
	for _, o := range ops {
		if o.Ino != 0 || o.Dir == dir && string(o.Name) == name {
			continue
		}
		// An entry read since that change (its dentry is the change's
		// own) shows it already: reading it again would only make each
		// name of the change stale in turn as the other is read.
		if e := t.names[nameKey{o.Dir, string(o.Name)}]; e != nil && e.change == change {
			continue
		}
		t.invalidateLocked(o.Dir, string(o.Name))
	}
	e := t.learnLocked(dir, frags, name, r.Bound, r.ETag, locked)
	if e != nil {
		e.change = change
	}
	return e
}

// nodeOf is the node of binding b, named in dir; in is its inode object
// when b holds no attributes.
func nodeOf(dir namespace.Ino, b *Binding, in *Inode) namespace.Node {
	n := namespace.Node{Ino: b.Ino, Kind: b.Kind, Nlink: 1}
	a := b.Node
	if a == nil && in != nil {
		a, n.Nlink = &in.Node, in.Nlink
	}
	if a != nil {
		n.Mode, n.Uid, n.Gid = a.Mode, a.Uid, a.Gid
		n.AtimeNs, n.MtimeNs, n.CtimeNs, n.MtimeSetNs = a.Atime, a.Mtime, a.Ctime, a.MtimeSet
		n.FileID, n.Target, n.Major, n.Minor = a.FileID, string(a.Target), a.Major, a.Minor
	}
	if b.Kind == namespace.KindDir {
		n.Parent = dir
	}
	return n
}

// resolve reads name in dir from the store and caches it.
func (t *Tree) resolve(ctx context.Context, dir namespace.Ino, frags uint32, name string) (*entry, error) {
	r, err := t.p.Resolve(ctx, dir, frags, name)
	if err != nil {
		return nil, err
	}
	e := t.learn(dir, frags, name, r)
	if e != nil && e.bound != nil && e.bound.Node == nil {
		if err := t.readInode(ctx, e); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// readInode reads the inode object of e's node, a node of several names
// (inode.go).
func (t *Tree) readInode(ctx context.Context, e *entry) error { return t.readLinked(ctx, e) }

// cached is name's entry if it is bound and fresh (freshLocked); known says
// it is cached bound, fresh or not. A use of a bound entry marks it in use
// for the refresher (refresh.go).
func (t *Tree) cached(dir namespace.Ino, name string) (n namespace.Node, fresh, known bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.names[nameKey{dir, name}]
	if e == nil || e.bound == nil {
		return namespace.Node{}, false, false
	}
	t.useLocked(e)
	if !t.freshLocked(e) || e.bound.Node == nil && e.node == nil {
		return namespace.Node{}, false, true
	}
	return nodeOf(dir, e.bound, e.node), true, true
}

// freshLocked says whether e may be served without reading the store: read
// or written since the last Refresh, and less than the TTL ago. mu held.
func (t *Tree) freshLocked(e *entry) bool {
	return e.gen == t.gen && (t.ttl <= 0 || t.clock().Sub(e.learned) < t.ttl)
}

// Lookup returns the node named name in directory dir: from the cache when
// it was read or written since the last Refresh and less than the TTL ago,
// else from the store.
func (t *Tree) Lookup(ctx context.Context, dir namespace.Ino, name string) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	if err := CheckName(name); err != nil {
		return namespace.Node{}, err
	}
	frags, err := t.dirFrags(dir)
	if err != nil {
		return namespace.Node{}, err
	}
	n, ok, known := t.cached(dir, name)
	if ok {
		return n, nil
	}
	// A name known bound, but stale, is read (one GET): a listing of its
	// directory would only find it there, and the GET come after anyway.
	if !known && t.absent(ctx, dir, frags, name) {
		return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", name, dir, namespace.ErrNotExist)
	}
	e, err := t.resolve(ctx, dir, frags, name)
	if err != nil {
		if n, ok := t.seenName(dir, name); ok && unanswered(err) {
			return n, nil
		}
		return namespace.Node{}, fmt.Errorf("lookup %q in %d: %w", name, dir, err)
	}
	if e == nil || e.bound == nil {
		return namespace.Node{}, fmt.Errorf("%q in directory %d: %w", name, dir, namespace.ErrNotExist)
	}
	return t.nodeOfEntry(e), nil
}

// While the store answers nothing (an outage), a read of a name, a node or
// a listing this Tree has seen answers what it last saw, past its TTL, as
// v1's view of the log answers during an outage (docs/outages.md): the
// read waits for the store within the call's deadline (op_timeout) first.
// A name never seen, and every change, still fail: nothing is known of
// them. The first read once the store answers again goes to it.

// unanswered says whether err is the store not answering (no answer in
// time, a connection refused or cut), as against an answer.
func unanswered(err error) bool {
	var ne *net.OpError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, staging.ErrTimeout) || errors.As(err, &ne)
}

// seenName is name in dir as this Tree last read it, fresh or not.
func (t *Tree) seenName(dir namespace.Ino, name string) (namespace.Node, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.names[nameKey{dir, name}]
	if e == nil || e.bound == nil || e.bound.Node == nil && e.node == nil {
		return namespace.Node{}, false
	}
	return nodeOf(dir, e.bound, e.node), true
}

// seenNode is node ino as this Tree last read it, fresh or not.
func (t *Tree) seenNode(ino namespace.Ino) (namespace.Node, bool) {
	t.mu.Lock()
	e := t.inos[ino]
	t.mu.Unlock()
	if e == nil {
		return namespace.Node{}, false
	}
	return t.seenName(e.dir, e.name)
}

// listedBefore is dir's names as of its last whole listing here and of the
// names of dir read or written since it began, each as last read; false
// when that listing holds a name not read since.
func (t *Tree) listedBefore(dir namespace.Ino) ([]namespace.Dirent, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lists[dir]
	if l == nil {
		return nil, false
	}
	for name := range l.etags {
		if t.names[nameKey{dir, name}] == nil {
			return nil, false
		}
	}
	var out []namespace.Dirent
	for k, e := range t.names {
		if k.dir != dir || e.bound == nil {
			continue
		}
		if _, listed := l.etags[k.name]; listed || !e.learned.Before(l.began) {
			out = append(out, namespace.Dirent{Name: k.name, Ino: e.bound.Ino, Kind: e.bound.Kind, Cookie: cookieOf(k.name, e.bound)})
		}
	}
	return out, true
}

// GetNode returns node ino: the root, a node whose name this Tree has seen
// (read again after a Refresh), or a file that lost its name while this
// Tree knew it (an orphan, with Nlink 0, until Forget).
func (t *Tree) GetNode(ctx context.Context, ino namespace.Ino) (namespace.Node, error) {
	if err := t.enter(); err != nil {
		return namespace.Node{}, err
	}
	defer t.calls.Done()
	if ino == namespace.RootIno {
		a, err := t.rootAttrs(ctx)
		if err != nil {
			return namespace.Node{}, err
		}
		return rootNodeOf(a), nil
	}
	e, err := t.current(ctx, ino)
	if err != nil {
		if n, ok := t.seenNode(ino); ok && unanswered(err) {
			return n, nil
		}
		return namespace.Node{}, err
	}
	if e == nil {
		t.mu.Lock()
		o, ok := t.orphans[ino]
		t.mu.Unlock()
		if ok {
			return o.node, nil
		}
		if n, _, ok := t.linkedNode(ctx, ino); ok {
			return n, nil // a node of several names, no name cached
		}
		return namespace.Node{}, fmt.Errorf("node %d: %w", ino, namespace.ErrNotExist)
	}
	return t.nodeOfEntry(e), nil
}

// current is the entry of node ino, read again when stale; nil when the
// Tree knows no name of it (an orphan, or a node never seen, or one whose
// name went).
func (t *Tree) current(ctx context.Context, ino namespace.Ino) (*entry, error) {
	t.mu.Lock()
	e := t.inos[ino]
	fresh := e != nil && t.freshLocked(e) && (e.bound.Node != nil || e.node != nil)
	if e != nil {
		t.useLocked(e)
		// A copy: a rename's tidy (tidyLater) sets the cached entry's ETag
		// under mu while the caller reads it.
		e = copyEntry(e)
	}
	t.mu.Unlock()
	if e == nil || fresh {
		return e, nil
	}
	e2, err := t.resolve(ctx, e.dir, e.frags, e.name)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", ino, err)
	}
	if e2 == nil || e2.bound == nil || e2.bound.Ino != ino {
		return nil, nil
	}
	return e2, nil
}

// fragPrefix is the prefix of the dentry keys of fragment f of dir.
func (t *Tree) fragPrefix(dir namespace.Ino, f uint32) string {
	d := hexN(uint64(dir), inoDigits)
	return rootPrefix(t.root) + dirPrefix + "d/" + hh(d) + "/" + d + "/" + hexN(uint64(f), fragDigits) + "/"
}

// listed is one key of a listing.
type listed struct {
	name string
	etag string
}

// dirList is what a whole listing of a directory found: every key (bound
// names and tombstones) with its ETag, as of when the listing began. A
// lookup's miss in the directory within the TTL of that is answered from it
// (absent), as v1 answers a miss from its copy of the log, at most
// ns_refresh old: the kernel looks every name up before it creates it, and
// that GET was a fifth of a create's requests.
type dirList struct {
	began time.Time
	gen   uint64
	etags map[string]string
}

// missListMax bounds the keys of a fragment a miss lists (one page): a
// directory with more is marked large, and its misses read the name.
const missListMax = 1000

// noteList records keys, a whole listing of dir begun at began while the
// Refresh count was gen, unless a Refresh came since or the listing held
// began later (a listing read ahead may end after a newer one).
func (t *Tree) noteList(dir namespace.Ino, gen uint64, began time.Time, keys []listed) {
	l := &dirList{began: began, gen: gen, etags: make(map[string]string, len(keys))}
	for _, k := range keys {
		l.etags[k.name] = k.etag
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.lists[dir]; gen == t.gen && (old == nil || old.gen != gen || !old.began.After(began)) {
		t.lists[dir] = l
	}
}

// absent says whether name is surely not bound in dir, as of a whole
// listing of dir begun less than the TTL ago (made now, one LIST a
// fragment, when there is none and the directory is not large): not among
// its keys, or its key is a tombstone this Tree read with that very ETag.
// A name another mount made since that listing began shows once the TTL is
// over (or at its create: Bind is the store's If-None-Match, never this).
// Any failure says no: the caller reads the name.
func (t *Tree) absent(ctx context.Context, dir namespace.Ino, frags uint32, name string) bool {
	if t.ttl <= 0 {
		return false // no TTL: every miss reads the store
	}
	t.mu.Lock()
	l, gen := t.lists[dir], t.gen
	fresh := l != nil && l.gen == gen && t.clock().Sub(l.began) < t.ttl
	large := t.large[dir]
	if !large {
		t.useListLocked(dir)
	}
	t.mu.Unlock()
	if !fresh {
		if large {
			return false
		}
		began := t.clock()
		keys, whole, err := t.listFragsUpTo(ctx, dir, frags, missListMax)
		if err != nil {
			return false
		}
		if !whole {
			t.mu.Lock()
			t.large[dir] = true
			t.mu.Unlock()
			return false
		}
		t.noteList(dir, gen, began, keys)
		l = &dirList{etags: map[string]string{}}
		for _, k := range keys {
			l.etags[k.name] = k.etag
		}
	}
	etag, listed := l.etags[name]
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.names[nameKey{dir, name}]
	if !listed {
		// A name this Tree holds bound is read, never answered from a
		// listing that may predate it: this mount's own rename of a name
		// of a node of several names into dir caches it without the
		// node, so Lookup's cache does not serve it.
		return e == nil || e.bound == nil
	}
	return e != nil && e.bound == nil && e.etag != "" && e.etag == etag
}

// listFragsUpTo lists every fragment of dir, one page of at most max keys
// each; whole is false when a fragment has more.
func (t *Tree) listFragsUpTo(ctx context.Context, dir namespace.Ino, frags uint32, max int) (keys []listed, whole bool, err error) {
	out := make([][]listed, frags)
	errs := make([]error, frags)
	more := make([]bool, frags)
	var wg sync.WaitGroup
	for f := range frags {
		wg.Add(1)
		go func() {
			defer wg.Done()
			page, err := t.st.List(ctx, t.fragPrefix(dir, f), "", max)
			if err != nil {
				errs[f] = fmt.Errorf("list fragment %d of directory %d: %w", f, dir, err)
				return
			}
			more[f] = page.Truncated
			for _, o := range page.Objects {
				if _, dn, err := ParseDentryKey(o.Key); err == nil && dn.Dir == dir && dn.InFragments(frags) {
					out[f] = append(out[f], listed{name: dn.Name, etag: o.ETag})
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, false, err
	}
	return slices.Concat(out...), !slices.Contains(more, true), nil
}

// listFrags lists every fragment of dir, one LIST each (more for a
// fragment past a page), sent at once.
func (t *Tree) listFrags(ctx context.Context, dir namespace.Ino, frags uint32) ([]listed, error) {
	out := make([][]listed, frags)
	errs := make([]error, frags)
	var wg sync.WaitGroup
	for f := range frags {
		wg.Add(1)
		go func() {
			defer wg.Done()
			objs, err := staging.ListAll(ctx, t.st, t.fragPrefix(dir, f))
			if err != nil {
				errs[f] = fmt.Errorf("list fragment %d of directory %d: %w", f, dir, err)
				return
			}
			for _, o := range objs {
				_, dn, err := ParseDentryKey(o.Key)
				if err != nil || dn.Dir != dir || !dn.InFragments(frags) {
					// Not a name of this directory's: never shown, and
					// never another name's fault.
					t.log.Warn("namespace v2: a key in a directory's listing is not one of its names",
						zap.String("key", o.Key), zap.Error(err))
					continue
				}
				out[f] = append(out[f], listed{name: dn.Name, etag: o.ETag})
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(out...), nil
}

// list is the names of dir bound now: a LIST of each fragment, then a GET
// of each name whose ETag the cache does not hold (up to t.parallel at
// once). A damaged dentry leaves its name out, logged; any other failure to
// read a name fails the listing. A read ahead of dir in flight is waited
// for first (its names are then cached), and a listing that follows one of
// its parent's may start the read ahead of its siblings (walkahead.go).
func (t *Tree) list(ctx context.Context, dir namespace.Ino) ([]namespace.Dirent, error) {
	t.waitAhead(ctx, dir)
	return t.listDir(ctx, dir, false)
}

// listDir is list; ahead says it is a read ahead.
func (t *Tree) listDir(ctx context.Context, dir namespace.Ino, ahead bool) ([]namespace.Dirent, error) {
	frags, err := t.dirFrags(dir)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	gen := t.gen
	t.mu.Unlock()
	began := t.clock()
	keys, err := t.listFrags(ctx, dir, frags)
	if err != nil {
		if out, ok := t.listedBefore(dir); ok && !ahead && unanswered(err) {
			return out, nil
		}
		return nil, err
	}
	t.noteList(dir, gen, began, keys)
	out := make([]namespace.Dirent, 0, len(keys))
	var todo []string
	var same []*entry // cached, and the listing says unchanged
	t.mu.Lock()
	for _, k := range keys {
		e := t.names[nameKey{dir, k.name}]
		switch {
		case e == nil || e.etag == "" || e.etag != k.etag || e.bound != nil && e.bound.Node == nil && e.node == nil:
			todo = append(todo, k.name)
		case e.bound != nil:
			e.gen = t.gen
			same = append(same, e)
			out = append(out, namespace.Dirent{Name: k.name, Ino: e.bound.Ino, Kind: e.bound.Kind, Cookie: cookieOf(k.name, e.bound)})
		}
	}
	t.mu.Unlock()
	got := make([]*entry, len(todo))
	errs := make([]error, len(todo))
	sem := make(chan struct{}, t.parallel)
	var wg sync.WaitGroup
	for i, name := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			got[i], errs[i] = t.resolve(ctx, dir, frags, name)
		}()
	}
	wg.Wait()
	// The names listed count as learned when the listing ends: the kernel
	// looks each one up right after (READDIRPLUS), and a name read at the
	// listing's start would otherwise have expired by then on a long one,
	// and be read again, one at a time (a listing of 500 names another
	// mount made: 1,003 GETs instead of 500). What a lookup serves is then
	// at most the TTL plus the listing's length old.
	now := t.clock()
	t.mu.Lock()
	for _, e := range append(same, got...) {
		if e != nil {
			e.learned = now
		}
	}
	t.mu.Unlock()
	for i, e := range got {
		switch {
		case errors.Is(errs[i], namespace.ErrCorrupt):
			t.log.Warn("namespace v2: a damaged name left out of a listing",
				zap.Uint64("dir", uint64(dir)), zap.String("name", todo[i]), zap.Error(errs[i]))
		case errs[i] != nil:
			return nil, fmt.Errorf("list directory %d: %w", dir, errs[i])
		case e != nil && e.bound != nil:
			out = append(out, namespace.Dirent{Name: todo[i], Ino: e.bound.Ino, Kind: e.bound.Kind, Cookie: cookieOf(todo[i], e.bound)})
		}
	}
	t.noteWalk(dir, now, out, ahead)
	return out, nil
}

// ReadDir lists directory dir sorted by name, from the store (see list).
func (t *Tree) ReadDir(ctx context.Context, dir namespace.Ino) ([]namespace.Dirent, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.calls.Done()
	out, err := t.list(ctx, dir)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ReadDirAfter lists the entries of directory dir whose cookie is above
// cookie, in cookie order. A name's cookie is its node's ino, or for a name
// of a node of several names one made of the name (cookieOf): unique in the
// directory, and stable while other names come and go.
func (t *Tree) ReadDirAfter(ctx context.Context, dir namespace.Ino, cookie uint64) ([]namespace.Dirent, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.calls.Done()
	all, err := t.list(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, d := range all {
		if d.Cookie > cookie {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cookie < out[j].Cookie })
	return out, nil
}

// attrsOf is the attributes of node ino as the Tree holds them (read
// again when stale): of a named node, or of an orphan.
func (t *Tree) attrsOf(ctx context.Context, ino namespace.Ino) (*Attrs, error) {
	if ino == namespace.RootIno {
		return t.rootAttrs(ctx)
	}
	e, err := t.current(ctx, ino)
	if err != nil {
		return nil, err
	}
	var a *Attrs
	t.mu.Lock()
	switch {
	case e != nil && e.bound.Node != nil:
		a = e.bound.Node
	case e != nil && e.node != nil:
		a = &e.node.Node
	}
	o, ok := t.orphans[ino]
	t.mu.Unlock()
	switch {
	case a != nil:
		return a, nil
	case ok:
		return o.attrs, nil
	}
	if _, a, ok := t.linkedNode(ctx, ino); ok {
		return a, nil // a node of several names, no name cached
	}
	return nil, fmt.Errorf("node %d: %w", ino, namespace.ErrNotExist)
}

// checkXattrName checks an attribute name as v1 does: "user." only.
func checkXattrName(name string) error {
	if len(name) > namespace.MaxNameLen {
		return fmt.Errorf("attribute name of %d bytes: %w", len(name), namespace.ErrNameTooLong)
	}
	if !strings.HasPrefix(name, "user.") || len(name) == len("user.") {
		return fmt.Errorf("attribute %q: only user.* attributes: %w", name, namespace.ErrNotSupported)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("attribute %q: %w", name, namespace.ErrInvalid)
	}
	return nil
}

// GetXattr returns the value of extended attribute name of node ino.
func (t *Tree) GetXattr(ctx context.Context, ino namespace.Ino, name string) ([]byte, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.calls.Done()
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	if name == FragmentsXattr {
		return t.fragsOf(ctx, ino) // frags.go
	}
	a, err := t.attrsOf(ctx, ino)
	if err != nil {
		return nil, err
	}
	for _, x := range a.Xattrs {
		if string(x.Name) == name {
			return slices.Clone(x.Value), nil
		}
	}
	return nil, fmt.Errorf("attribute %q of node %d: %w", name, ino, namespace.ErrNoAttr)
}

// ListXattr returns the names of node ino's extended attributes, sorted.
func (t *Tree) ListXattr(ctx context.Context, ino namespace.Ino) ([]string, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.calls.Done()
	a, err := t.attrsOf(ctx, ino)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(a.Xattrs))
	for _, x := range a.Xattrs {
		out = append(out, string(x.Name))
	}
	return out, nil // Attrs keeps them sorted
}
