package namespace

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// Options tune a Namespace. The zero value is the default.
type Options struct {
	// CompactEvery: a mount writes a snapshot once the ops it applied since
	// the newest snapshot it knows reach max(CompactEvery, nodes/4), so that
	// the cost of snapshots per op does not grow with the namespace. 0 means
	// 1000.
	CompactEvery uint64
	// PutAttempts bounds the sends of one entry whose outcome is unknown (a
	// network error, not a refusal). 0 means 3.
	PutAttempts int
	// Now is the clock of change times. nil means time.Now.
	Now func() time.Time
	// Logger receives what does not fail an operation (a snapshot that
	// could not be written). nil means no logging.
	Logger *zap.Logger
	// FinishTimeout bounds a change once its first log entry send has begun.
	// From then on the change no longer follows the caller's cancellation
	// (an interrupted caller must not be told a change failed that may have
	// landed): it lands, is known not to have, or fails after this long.
	// It also bounds each request of the background work (trimming).
	// 0 means 3 minutes.
	FinishTimeout time.Duration
	// TailTrust: for this long after the mount last confirmed that its state
	// is the end of the log, a change appends at the next seq without
	// reading the log first, and Refresh reads one entry instead of listing
	// (see the package doc). It must be at most TrimGrace/4. 0 means 1
	// minute.
	TailTrust time.Duration
	// TrimGrace: log entries a snapshot covers, and snapshots older than the
	// newest, are deleted once the store's LastModified of them is older than
	// this. 0 means 10 minutes.
	TrimGrace time.Duration
	// Clock is the clock of TailTrust and TrimGrace (compared with the
	// store's LastModified). nil means time.Now.
	Clock func() time.Time
	// ReadFenced opens a log that ends in a fence (fence.go) with the
	// state before it, for the upgrade that wrote it; without it Open
	// refuses such a log (ErrFenced). Changes fail either way.
	ReadFenced bool
}

// Owner is the owner of a new node.
type Owner struct {
	Uid uint32
	Gid uint32
}

// SetAttr is a change of attributes; nil fields are left alone. Size is not
// here: it is the file's own (its head object).
type SetAttr struct {
	Mode  *uint32
	Uid   *uint32
	Gid   *uint32
	Atime *time.Time
	Mtime *time.Time
	// Ctime: nil sets it to the time of the change, as POSIX does for any
	// attribute change.
	Ctime *time.Time
}

// Namespace is the namespace of one mount root, kept in step with the log.
// It is safe for concurrent use.
//
// Locking: appendMu serialises everything that applies the log (the
// committer, the apply step of Refresh) and is held by the committer across
// the store calls of the append protocol; mu guards the state and is held
// only in memory, so reads (Lookup, GetNode, ReadDir, ...) never wait for the
// network. Order: appendMu before mu before qmu. The state changes only with
// both held, so a holder of appendMu may read it without mu. qmu guards the
// queue of changes waiting for the committer, trimMu the trimming requests.
type Namespace struct {
	store staging.Store
	root  string
	opts  Options
	log   *zap.Logger

	appendMu sync.Mutex
	mu       sync.RWMutex
	st       *state // GUARDED_BY(mu); written only with appendMu held too
	// shown holds the changes made with SetAttrLater that have not landed
	// yet, by node, in the order they were made; GUARDED_BY(mu).
	shown map[Ino][]*pending
	// tailAt is when this mount last confirmed that st.seq is the last
	// entry of the log (zero: never); GUARDED_BY(mu), written only with
	// appendMu held too.
	tailAt time.Time
	// sinceSnap counts the ops applied since the newest snapshot this mount
	// knows; GUARDED_BY(appendMu).
	sinceSnap uint64
	// fence is the fence the log ends in, once this mount met it (nil:
	// none; fence.go); GUARDED_BY(mu), written only with appendMu held too.
	fence *FencedError

	qmu        sync.Mutex
	queue      []*pending // GUARDED_BY(qmu): changes not taken by the committer
	committing bool       // GUARDED_BY(qmu): the committer runs
	// laterTimer starts the committer for changes made with SetAttrLater
	// that nothing else sent (see later.go); GUARDED_BY(qmu).
	laterTimer *time.Timer

	trimMu   sync.Mutex
	trimAt   uint64 // GUARDED_BY(trimMu): the snapshot of a trim pass asked for
	trimming bool   // GUARDED_BY(trimMu): the trimmer runs

	// bg tracks the committer and the trimmer; ctx ends the trimmer (Close).
	bg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Open loads the namespace under root: the newest snapshot, then the log
// entries after it. An empty root is an empty namespace (the root directory
// only, mode 0755, owned by 0:0; set its attributes with SetAttr).
func Open(ctx context.Context, store staging.Store, root string, opts Options) (*Namespace, error) {
	if opts.CompactEvery == 0 {
		opts.CompactEvery = 1000
	}
	if opts.PutAttempts <= 0 {
		opts.PutAttempts = 3
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.FinishTimeout <= 0 {
		opts.FinishTimeout = 3 * time.Minute
	}
	if opts.TailTrust <= 0 {
		opts.TailTrust = time.Minute
	}
	if opts.TrimGrace <= 0 {
		opts.TrimGrace = 10 * time.Minute
	}
	if opts.TailTrust > opts.TrimGrace/4 {
		return nil, fmt.Errorf("namespace options: TailTrust %v is over a quarter of TrimGrace %v: an append could land at a seq that was used and trimmed", opts.TailTrust, opts.TrimGrace)
	}
	ns := &Namespace{store: store, root: strings.Trim(root, "/"), opts: opts, log: opts.Logger}
	if ns.log == nil {
		ns.log = zap.NewNop()
	}
	st, err := ns.loadSnapshot(ctx, 0)
	if err != nil {
		return nil, err
	}
	ns.st = st
	ns.appendMu.Lock()
	defer ns.appendMu.Unlock()
	if err := ns.refreshLocked(ctx); err != nil && !(opts.ReadFenced && errors.Is(err, ErrFenced)) {
		return nil, err
	}
	// Nothing runs in the background yet: no goroutine to stop here.
	ns.ctx, ns.cancel = context.WithCancel(context.Background())
	return ns, nil
}

func (ns *Namespace) logPrefix() string  { return prefix(ns.root) + logDir }
func (ns *Namespace) snapPrefix() string { return prefix(ns.root) + snapDir }

// Wait waits for the changes queued or in flight (those whose callers left
// too, see WithGone; each is bounded by Options.FinishTimeout) and for a
// trimming pass under way.
func (ns *Namespace) Wait() { ns.bg.Wait() }

// Close stops trimming and waits as Wait does. The namespace stays readable;
// changes still work but no longer trim the log.
func (ns *Namespace) Close() error {
	ns.cancel()
	ns.Kick() // changes made with SetAttrLater and not sent yet
	ns.bg.Wait()
	return nil
}

// Seq is the seq of the last entry applied.
func (ns *Namespace) Seq() uint64 {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.seq
}

// The reads of Names below answer from memory and never wait for the
// store: their context is not used, and they fail only as the state says
// (ErrNotExist, ...), never for the store.

// Lookup returns the node named name in directory dir.
func (ns *Namespace) Lookup(_ context.Context, dir Ino, name string) (Node, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	_, n, err := ns.st.lookup(dir, name)
	if err != nil {
		return Node{}, err
	}
	return ns.viewLocked(n), nil
}

// GetNode returns node ino (also an orphan's).
func (ns *Namespace) GetNode(_ context.Context, ino Ino) (Node, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return Node{}, err
	}
	return ns.viewLocked(n), nil
}

// ReadDir lists directory dir sorted by name.
func (ns *Namespace) ReadDir(_ context.Context, dir Ino) ([]Dirent, error) {
	out, err := ns.list(dir, 0)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// ReadDirAfter lists the entries of directory dir whose cookie is above
// cookie, in cookie order: a listing resumed at the cookie of the last entry
// returned (a readdir offset) neither repeats nor skips entries that stayed,
// whatever was removed meanwhile. Cookie 0 lists everything.
func (ns *Namespace) ReadDirAfter(_ context.Context, dir Ino, cookie uint64) ([]Dirent, error) {
	out, err := ns.list(dir, cookie)
	sort.Slice(out, func(i, j int) bool { return out[i].Cookie < out[j].Cookie })
	return out, err
}

func (ns *Namespace) list(dir Ino, after uint64) ([]Dirent, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	d, err := ns.st.dir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Dirent, 0, len(d.children))
	for name, de := range d.children {
		if de.cookie > after {
			out = append(out, Dirent{Name: name, Ino: de.ino, Kind: ns.st.nodes[de.ino].kind, Cookie: de.cookie})
		}
	}
	return out, nil
}

// GetXattr returns the value of extended attribute name of node ino.
func (ns *Namespace) GetXattr(_ context.Context, ino Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return nil, err
	}
	v, ok := n.xattrs[name]
	if !ok {
		return nil, fmt.Errorf("attribute %q of node %d: %w", name, ino, ErrNoAttr)
	}
	return append([]byte{}, v...), nil
}

// ListXattr returns the names of node ino's extended attributes, sorted.
func (ns *Namespace) ListXattr(_ context.Context, ino Ino) ([]string, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(n.xattrs))
	for name := range n.xattrs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// Orphans lists the files with no name left, by ino.
func (ns *Namespace) Orphans(context.Context) ([]Orphan, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.orphans(), nil
}

// Nodes counts the namespace's nodes (files, directories and the rest,
// orphans included): what df shows as files in use.
func (ns *Namespace) Nodes() int {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return len(ns.st.nodes)
}

// Orphaned reports whether fileID is an orphan: a file with no name left.
// It costs O(1), whatever the namespace.
func (ns *Namespace) Orphaned(_ context.Context, fileID string) (bool, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.orphaned(fileID), nil
}

// Named reports whether fileID is a file with a name left: neither an
// orphan, nor forgotten (a cleaner deleted it), nor unknown. It costs O(1).
func (ns *Namespace) Named(_ context.Context, fileID string) (bool, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	ino, ok := ns.st.byFile[fileID]
	return ok && ns.st.nodes[ino].nlink > 0, nil
}
