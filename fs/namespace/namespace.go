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
	"golang.org/x/sync/errgroup"

	"ckptfs/staging"
)

// Options tune a Namespace. The zero value is the default.
type Options struct {
	// CompactEvery: the writer of every CompactEvery-th entry writes a
	// snapshot. 0 means 1000.
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
	// 0 means 3 minutes.
	FinishTimeout time.Duration
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
// Locking: appendMu serialises everything that reads the log and applies it
// (Refresh and every change) and is held across the store calls of the append
// protocol; mu guards the state and is held only in memory, so reads
// (Lookup, GetNode, ReadDir, ...) never wait for the network. Order: appendMu
// before mu. The state changes only with both held, so a holder of appendMu
// may read it without mu.
type Namespace struct {
	store staging.Store
	root  string
	opts  Options
	log   *zap.Logger

	appendMu sync.Mutex
	mu       sync.RWMutex
	bg       sync.WaitGroup // changes whose callers left
	st       *state         // GUARDED_BY(mu); written only with appendMu held too
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
	if opts.FinishTimeout <= 0 {
		opts.FinishTimeout = 3 * time.Minute
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
	if err := ns.refreshLocked(ctx); err != nil {
		return nil, err
	}
	return ns, nil
}

func (ns *Namespace) logPrefix() string  { return prefix(ns.root) + logDir }
func (ns *Namespace) snapPrefix() string { return prefix(ns.root) + snapDir }

// newestSnapshot returns the seq of the newest snapshot, 0 if none.
func (ns *Namespace) newestSnapshot(ctx context.Context) (uint64, error) {
	objs, err := staging.ListAll(ctx, ns.store, ns.snapPrefix())
	if err != nil {
		return 0, fmt.Errorf("list namespace snapshots: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		seq, ok := parseSeq(o.Key, ns.snapPrefix())
		if !ok {
			return 0, corruptf(o.Key, "not a snapshot name")
		}
		newest = max(newest, seq)
	}
	return newest, nil
}

// loadSnapshot reads the newest snapshot; with none, or none newer than
// after, it returns a fresh state (after == 0) or nil.
func (ns *Namespace) loadSnapshot(ctx context.Context, after uint64) (*state, error) {
	seq, err := ns.newestSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	if seq == 0 || seq <= after {
		if after == 0 {
			return newState(), nil
		}
		return nil, nil
	}
	key := SnapKey(ns.root, seq)
	data, _, err := staging.GetLimited(ctx, ns.store, key, envHeaderLen+maxObjectBody)
	if err != nil {
		return nil, fmt.Errorf("read namespace snapshot %s: %w", key, err)
	}
	return decodeSnapshot(key, seq, data)
}

// Refresh applies the log entries written since the last refresh or change.
//
// It holds no lock across its store calls: it lists and reads the entries
// after the state it saw, then applies them under appendMu if no change
// moved the state meanwhile (a change refreshes first, so it has applied
// them itself). A refresh stuck on the store thus delays no change of this
// mount, and no read.
func (ns *Namespace) Refresh(ctx context.Context) error {
	for {
		ns.mu.RLock()
		applied := ns.st.seq
		ns.mu.RUnlock()
		page, seqs, err := ns.listAfter(ctx, applied)
		if err != nil || len(page.Objects) == 0 {
			return err
		}
		if len(seqs) == 0 {
			// A gap: rare (a cleaner deleted entries a snapshot covers);
			// the locked path loads the snapshot.
			ns.appendMu.Lock()
			err := ns.refreshLocked(ctx)
			ns.appendMu.Unlock()
			return err
		}
		entries, err := ns.readEntries(ctx, seqs)
		if err != nil {
			return err
		}
		ns.appendMu.Lock()
		moved := ns.st.seq != applied
		if !moved {
			for _, e := range entries {
				if err := ns.applyEntry(e); err != nil {
					ns.appendMu.Unlock()
					return err
				}
			}
		}
		ns.appendMu.Unlock()
		if moved || (!page.Truncated && len(seqs) == len(page.Objects)) {
			return nil
		}
	}
}

// listAfter lists a page of the log after entry applied and the sequence
// numbers in it that follow applied without a gap.
func (ns *Namespace) listAfter(ctx context.Context, applied uint64) (staging.ListPage, []uint64, error) {
	page, err := ns.store.List(ctx, ns.logPrefix(), LogKey(ns.root, applied), 1000)
	if err != nil {
		return page, nil, fmt.Errorf("list namespace log after %d: %w", applied, err)
	}
	seqs, err := ns.contiguous(page, applied)
	return page, seqs, err
}

// contiguous returns the sequence numbers of page that follow applied
// without a gap.
func (ns *Namespace) contiguous(page staging.ListPage, applied uint64) ([]uint64, error) {
	seqs := make([]uint64, 0, len(page.Objects))
	for _, o := range page.Objects {
		seq, ok := parseSeq(o.Key, ns.logPrefix())
		if !ok {
			return nil, corruptf(o.Key, "not a log entry name")
		}
		if seq != applied+uint64(len(seqs))+1 {
			break // a gap: dealt with when it is first
		}
		seqs = append(seqs, seq)
	}
	return seqs, nil
}

// refreshLocked reads and applies every entry after st.seq. Entries are
// contiguous; a gap is only legitimate when a cleaner deleted entries that a
// snapshot covers, and then the snapshot replaces the state.
func (ns *Namespace) refreshLocked(ctx context.Context) error {
	for {
		applied := ns.st.seq
		page, seqs, err := ns.listAfter(ctx, applied)
		if err != nil || len(page.Objects) == 0 {
			return err
		}
		if len(seqs) == 0 {
			first, _ := parseSeq(page.Objects[0].Key, ns.logPrefix())
			if err := ns.skipGap(ctx, first); err != nil {
				return err
			}
			continue
		}
		entries, err := ns.readEntries(ctx, seqs)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := ns.applyEntry(e); err != nil {
				return err
			}
		}
		if !page.Truncated && len(seqs) == len(page.Objects) {
			return nil
		}
	}
}

// readEntries reads the entries seqs, several at once: a mount far behind
// waits for the link's latency once per batch, not once per entry.
func (ns *Namespace) readEntries(ctx context.Context, seqs []uint64) ([]*entry, error) {
	out := make([]*entry, len(seqs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readParallelism)
	for i, seq := range seqs {
		g.Go(func() error {
			e, err := ns.readEntry(gctx, seq)
			out[i] = e
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// readParallelism bounds the entries read at once by a refresh.
const readParallelism = 16

// skipGap handles a log that resumes at seq past st.seq+1.
func (ns *Namespace) skipGap(ctx context.Context, seq uint64) error {
	st, err := ns.loadSnapshot(ctx, ns.st.seq)
	if err != nil {
		return err
	}
	if st == nil || st.seq+1 < seq {
		return corruptf(LogKey(ns.root, ns.st.seq+1), "log entries %d..%d missing and no snapshot covers them", ns.st.seq+1, seq-1)
	}
	ns.mu.Lock()
	ns.st = st
	ns.mu.Unlock()
	return nil
}

func (ns *Namespace) readEntry(ctx context.Context, seq uint64) (*entry, error) {
	key := LogKey(ns.root, seq)
	data, _, err := staging.GetLimited(ctx, ns.store, key, envHeaderLen+maxObjectBody)
	if err != nil {
		return nil, fmt.Errorf("read namespace entry %s: %w", key, err)
	}
	return decodeEntry(key, seq, data)
}

// applyEntry applies an entry read from the log. One that does not apply is
// corruption: its writer checked it against this very state.
func (ns *Namespace) applyEntry(e *entry) error {
	if err := ns.st.apply(e, true); err != nil {
		return corruptf(LogKey(ns.root, e.Seq), "does not apply: %v", err)
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if err := ns.st.apply(e, false); err != nil {
		// The dry run above passed; apply checks nothing more.
		return corruptf(LogKey(ns.root, e.Seq), "does not apply: %v", err)
	}
	return nil
}

// change appends o to the log and applies it; done, if not nil, runs with
// the state just after the change, under mu.
//
// The append protocol, with appendMu held throughout: read the entries this
// mount missed; check o against the state; create entry seq = state+1 with
// If-None-Match. On ErrPrecondition another writer has seq: read it — if it
// carries our change id, an earlier send of ours landed and we are done —
// else apply it and try again at the next seq (o is checked again, so a name
// taken meanwhile gives ErrExist). A send that fails otherwise has an
// unknown outcome; it is resent at the same seq (never at another, which
// could apply the change twice).
func (ns *Namespace) change(ctx context.Context, o op, done func(st *state, seq uint64)) error {
	return ns.changeHooked(ctx, o, nil, done)
}

// changeHooked is change with before, if not nil, run under mu with the
// state just before the change is applied.
//
// The change runs in a goroutine of its own, owned by the namespace (Wait
// waits for it), so that a caller whose context ends and who is gone (see
// WithGone: a process being killed) can leave at once while the change
// finishes, landed or not, as it would have with the caller waiting. A
// caller still there waits for the real outcome.
func (ns *Namespace) changeHooked(ctx context.Context, o op, before, done func(st *state, seq uint64)) error {
	gone, _ := ctx.Value(goneKey{}).(func() bool)
	if gone == nil {
		return ns.changeNow(ctx, o, before, done)
	}
	var hookMu sync.Mutex
	left := false // the caller left: its hooks write nowhere now
	guard := func(h func(st *state, seq uint64)) func(st *state, seq uint64) {
		if h == nil {
			return nil
		}
		return func(st *state, seq uint64) {
			hookMu.Lock()
			defer hookMu.Unlock()
			if !left {
				h(st, seq)
			}
		}
	}
	res := make(chan error, 1)
	ns.bg.Add(1)
	go func() {
		defer ns.bg.Done()
		res <- ns.changeNow(ctx, o, guard(before), guard(done))
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
	}
	for {
		select {
		case err := <-res:
			return err
		case <-time.After(goneCheck):
		}
		if gone() {
			hookMu.Lock()
			left = true
			hookMu.Unlock()
			ns.log.Info("caller gone; its change finishes without it", zap.String("op", o.Kind))
			return fmt.Errorf("%s: %w", o.Kind, context.Canceled)
		}
	}
}

// goneCheck is how often a change whose caller was interrupted asks whether
// the caller is gone.
const goneCheck = 10 * time.Millisecond

type goneKey struct{}

// WithGone returns ctx carrying gone, which says whether the caller has left
// for good (a process with a fatal signal pending): once ctx ends and gone
// says so, a change returns at once and finishes without its caller.
func WithGone(ctx context.Context, gone func() bool) context.Context {
	return context.WithValue(ctx, goneKey{}, gone)
}

// Wait waits for the changes whose callers left (see WithGone); each is
// bounded by Options.FinishTimeout.
func (ns *Namespace) Wait() { ns.bg.Wait() }

func (ns *Namespace) changeNow(ctx context.Context, o op, before, done func(st *state, seq uint64)) error {
	ns.appendMu.Lock()
	snap, err := ns.changeLocked(ctx, o, before, done)
	ns.appendMu.Unlock()
	if snap != nil {
		ns.writeSnapshot(context.WithoutCancel(ctx), snap.seq, snap.data)
	}
	return err
}

// maxConflicts bounds the sends of one entry refused by a write of the same
// key that is not visible yet.
const maxConflicts = 8

// backoff waits before the attempt-th resend: 10 ms, doubling, at most
// 640 ms. appendMu stays held: the next change of this mount could only
// wait for this one anyway.
func backoff(ctx context.Context, attempt int) error {
	d := 10 * time.Millisecond << min(attempt-1, 6)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type pendingSnapshot struct {
	seq  uint64
	data []byte
}

func (ns *Namespace) changeLocked(ctx context.Context, o op, before, done func(st *state, seq uint64)) (*pendingSnapshot, error) {
	if err := ns.refreshLocked(ctx); err != nil {
		return nil, err
	}
	// Nothing is sent yet: a caller cancelled up to here changed nothing.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// From the first send on, the entry may land whatever the caller does,
	// so the change is finished (landed, refused, or failed after
	// FinishTimeout) rather than abandoned: an interrupted caller is never
	// told that a change failed that is in the log.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ns.opts.FinishTimeout)
	defer cancel()
	e := &entry{ID: randomID(), Time: ns.opts.Now().UnixNano(), Op: o}
	attempts, conflicts := 0, 0
	for {
		e.Seq = ns.st.seq + 1
		if err := ns.st.apply(e, true); err != nil {
			return nil, err
		}
		key := LogKey(ns.root, e.Seq)
		_, err := ns.store.Put(ctx, key, encodeEntry(e), staging.PutOptions{
			Conditions: staging.Conditions{IfNoneMatch: true},
			Metadata:   map[string]string{writerMeta: e.ID},
		})
		if err != nil && !errors.Is(err, staging.ErrPrecondition) {
			attempts++
			if attempts >= ns.opts.PutAttempts {
				return nil, fmt.Errorf("append namespace entry %s (%s; it may yet appear): %w", key, o.Kind, err)
			}
			if err := backoff(ctx, attempts); err != nil {
				return nil, fmt.Errorf("append namespace entry %s (%s; it may yet appear): %w", key, o.Kind, err)
			}
			continue // same seq
		}
		if err != nil {
			other, rerr := ns.readEntry(ctx, e.Seq)
			if errors.Is(rerr, staging.ErrNotFound) {
				// Refused, yet not there: a conditional write of the same
				// key still in flight (S3's 409). It lands or fails soon.
				conflicts++
				if conflicts >= maxConflicts {
					return nil, fmt.Errorf("append namespace entry %s (%s): refused, yet absent after %d tries: %w", key, o.Kind, conflicts, err)
				}
				if err := backoff(ctx, conflicts); err != nil {
					return nil, fmt.Errorf("append namespace entry %s (%s): %w", key, o.Kind, err)
				}
				continue
			}
			if rerr != nil {
				return nil, rerr
			}
			if other.ID != e.ID {
				if err := ns.applyEntry(other); err != nil {
					return nil, err
				}
				if err := ns.refreshLocked(ctx); err != nil {
					return nil, err
				}
				attempts, conflicts = 0, 0
				continue
			}
			e = other // ours: an earlier send landed
		}
		ns.mu.Lock()
		if before != nil {
			before(ns.st, e.Seq)
		}
		err = ns.st.apply(e, false)
		if err == nil && done != nil {
			done(ns.st, e.Seq)
		}
		var snap *pendingSnapshot
		if err == nil && e.Seq%ns.opts.CompactEvery == 0 {
			snap = &pendingSnapshot{seq: e.Seq, data: encodeSnapshot(ns.st)}
		}
		ns.mu.Unlock()
		if err != nil {
			return nil, corruptf(key, "does not apply: %v", err)
		}
		return snap, nil
	}
}

// writeSnapshot stores the snapshot as of seq. Another writer may have
// stored it already; failing is harmless (the log still has everything), so
// it is only logged.
func (ns *Namespace) writeSnapshot(ctx context.Context, seq uint64, data []byte) {
	key := SnapKey(ns.root, seq)
	_, err := ns.store.Put(ctx, key, data, staging.PutOptions{
		Conditions: staging.Conditions{IfNoneMatch: true},
	})
	if err != nil && !errors.Is(err, staging.ErrPrecondition) {
		ns.log.Warn("write namespace snapshot", zap.String("key", key), zap.Error(err))
	}
}

// Compact writes a snapshot of the state as of the newest entry now (if no
// snapshot of that seq exists).
func (ns *Namespace) Compact(ctx context.Context) error {
	ns.appendMu.Lock()
	err := ns.refreshLocked(ctx)
	seq, data := ns.st.seq, []byte(nil)
	if err == nil && seq > 0 {
		data = encodeSnapshot(ns.st)
	}
	ns.appendMu.Unlock()
	if err != nil || data == nil {
		return err
	}
	key := SnapKey(ns.root, seq)
	_, err = ns.store.Put(ctx, key, data, staging.PutOptions{
		Conditions: staging.Conditions{IfNoneMatch: true},
	})
	if err != nil && !errors.Is(err, staging.ErrPrecondition) {
		return fmt.Errorf("write namespace snapshot %s: %w", key, err)
	}
	return nil
}

// Compactable returns the seq up to which a cleaner may delete log entries:
// the newest snapshot covers them. It is one below that snapshot's seq: the
// entry the snapshot is at stays, so that a mount lagging behind always
// finds an entry past the gap (and reloads the snapshot) rather than an
// empty log it would append to at a seq already used. Snapshots older than
// the newest may go too. The cleaner should still spare entries written in
// the last minutes, for a mount stalled between reading the log and
// appending to it. 0 means nothing is compactable.
func (ns *Namespace) Compactable(ctx context.Context) (upTo uint64, err error) {
	seq, err := ns.newestSnapshot(ctx)
	if seq == 0 || err != nil {
		return 0, err
	}
	return seq - 1, nil
}

// Seq is the seq of the last entry applied.
func (ns *Namespace) Seq() uint64 {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.seq
}

// Lookup returns the node named name in directory dir.
func (ns *Namespace) Lookup(dir Ino, name string) (Node, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	_, n, err := ns.st.lookup(dir, name)
	if err != nil {
		return Node{}, err
	}
	return n.public(), nil
}

// GetNode returns node ino (also an orphan's).
func (ns *Namespace) GetNode(ino Ino) (Node, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	n, err := ns.st.get(ino)
	if err != nil {
		return Node{}, err
	}
	return n.public(), nil
}

// ReadDir lists directory dir sorted by name.
func (ns *Namespace) ReadDir(dir Ino) ([]Dirent, error) {
	out, err := ns.list(dir, 0)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// ReadDirAfter lists the entries of directory dir whose cookie is above
// cookie, in cookie order: a listing resumed at the cookie of the last entry
// returned (a readdir offset) neither repeats nor skips entries that stayed,
// whatever was removed meanwhile. Cookie 0 lists everything.
func (ns *Namespace) ReadDirAfter(dir Ino, cookie uint64) ([]Dirent, error) {
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
func (ns *Namespace) GetXattr(ino Ino, name string) ([]byte, error) {
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
func (ns *Namespace) ListXattr(ino Ino) ([]string, error) {
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
func (ns *Namespace) Orphans() []Orphan {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.orphans()
}

func nodeAt(out *Node, ino Ino) func(st *state, seq uint64) {
	return func(st *state, seq uint64) {
		if n := st.nodes[ino]; n != nil {
			*out = n.public()
		}
	}
}

func created(out *Node) func(st *state, seq uint64) {
	return func(st *state, seq uint64) { *out = st.nodes[inoOf(seq)].public() }
}

// removed returns hooks that leave in out the node named name in dir before
// a change, as it is after the change (Nlink 0 once its last name is gone,
// even if the node itself is gone).
func removed(out *Node, dir Ino, name string) (before, after func(st *state, seq uint64)) {
	var pre *Node
	before = func(st *state, seq uint64) {
		if d := st.nodes[dir]; d != nil && d.kind == KindDir {
			if de, ok := d.children[name]; ok {
				n := st.nodes[de.ino].public()
				pre = &n
			}
		}
	}
	after = func(st *state, seq uint64) {
		switch {
		case pre == nil:
		case st.nodes[pre.Ino] != nil:
			*out = st.nodes[pre.Ino].public()
		default:
			*out = *pre
			out.Nlink = 0
		}
	}
	return before, after
}

// Create makes a regular file named name in directory parent with a new file
// id, and returns it.
func (ns *Namespace) Create(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opCreate, Parent: parent, Name: bname(name), Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid, FileID: NewFileID()}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("create %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Mkdir makes a directory.
func (ns *Namespace) Mkdir(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opMkdir, Parent: parent, Name: bname(name), Mode: mode,
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("mkdir %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Symlink makes a symbolic link to target.
func (ns *Namespace) Symlink(ctx context.Context, parent Ino, name, target string, owner Owner) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opSymlink, Parent: parent, Name: bname(name), Target: bname(target),
		Uid: owner.Uid, Gid: owner.Gid}, created(&n))
	if err != nil {
		return Node{}, fmt.Errorf("symlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Link gives node ino (a file or symlink) another name and returns the node
// with its new link count.
func (ns *Namespace) Link(ctx context.Context, ino, newParent Ino, newName string) (Node, error) {
	var n Node
	err := ns.change(ctx, op{Kind: opLink, Ino: ino, Parent: newParent, Name: bname(newName)}, nodeAt(&n, ino))
	if err != nil {
		return Node{}, fmt.Errorf("link %d as %q in %d: %w", ino, newName, newParent, err)
	}
	return n, nil
}

// Unlink removes a name of a file or symlink and returns the node as it is
// after: Nlink 0 for a file means its id is now an orphan (see Orphans);
// the mount that unlinked it owns deleting its data and calling Forget once
// its last handle is closed.
func (ns *Namespace) Unlink(ctx context.Context, parent Ino, name string) (Node, error) {
	var n Node
	before, after := removed(&n, parent, name)
	err := ns.changeHooked(ctx, op{Kind: opUnlink, Parent: parent, Name: bname(name)}, before, after)
	if err != nil {
		return Node{}, fmt.Errorf("unlink %q in %d: %w", name, parent, err)
	}
	return n, nil
}

// Rmdir removes an empty directory.
func (ns *Namespace) Rmdir(ctx context.Context, parent Ino, name string) error {
	if err := ns.change(ctx, op{Kind: opRmdir, Parent: parent, Name: bname(name)}, nil); err != nil {
		return fmt.Errorf("rmdir %q in %d: %w", name, parent, err)
	}
	return nil
}

// Rename moves oldName in oldParent to newName in newParent, atomically,
// replacing a file or empty directory there unless flags say otherwise. It
// returns the node replaced, as it is after (Ino 0 when none was; a file
// with Nlink 0 is now an orphan, as with Unlink).
func (ns *Namespace) Rename(ctx context.Context, oldParent Ino, oldName string, newParent Ino, newName string, flags RenameFlags) (Node, error) {
	var replaced Node
	o := op{Kind: opRename, Parent: oldParent, Name: bname(oldName), NewParent: newParent,
		NewName: bname(newName), Flags: uint32(flags)}
	var before, after func(st *state, seq uint64)
	if flags&RenameExchange == 0 {
		before, after = removed(&replaced, newParent, newName)
		b := before
		before = func(st *state, seq uint64) {
			// Renaming a name onto another name of the same node replaces
			// nothing.
			if d := st.nodes[oldParent]; d != nil && d.kind == KindDir {
				if nd := st.nodes[newParent]; nd != nil && nd.kind == KindDir {
					if nd.children[newName].ino == d.children[oldName].ino {
						return
					}
				}
			}
			b(st, seq)
		}
	}
	err := ns.changeHooked(ctx, o, before, after)
	if err != nil {
		return Node{}, fmt.Errorf("rename %q in %d to %q in %d: %w", oldName, oldParent, newName, newParent, err)
	}
	return replaced, nil
}

// SetAttr changes attributes of node ino and returns the node after.
func (ns *Namespace) SetAttr(ctx context.Context, ino Ino, a SetAttr) (Node, error) {
	rec := &attrRec{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid}
	ts := func(t *time.Time) *int64 {
		if t == nil {
			return nil
		}
		v := t.UnixNano()
		return &v
	}
	rec.Atime, rec.Mtime, rec.Ctime = ts(a.Atime), ts(a.Mtime), ts(a.Ctime)
	var n Node
	if err := ns.change(ctx, op{Kind: opSetAttr, Ino: ino, Attr: rec}, nodeAt(&n, ino)); err != nil {
		return Node{}, fmt.Errorf("setattr %d: %w", ino, err)
	}
	return n, nil
}

// SetXattr sets extended attribute name ("user." only) of node ino.
func (ns *Namespace) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags XattrFlags) error {
	if err := ns.change(ctx, op{Kind: opSetXattr, Ino: ino, Name: bname(name),
		Value: append([]byte{}, value...), Flags: uint32(flags)}, nil); err != nil {
		return fmt.Errorf("setxattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// RemoveXattr removes extended attribute name of node ino.
func (ns *Namespace) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	if err := ns.change(ctx, op{Kind: opRemoveXattr, Ino: ino, Name: bname(name)}, nil); err != nil {
		return fmt.Errorf("removexattr %q of %d: %w", name, ino, err)
	}
	return nil
}

// Forget drops orphan fileID, once its data is deleted.
func (ns *Namespace) Forget(ctx context.Context, fileID string) error {
	if err := ns.change(ctx, op{Kind: opForget, FileID: fileID}, nil); err != nil {
		return fmt.Errorf("forget file %s: %w", fileID, err)
	}
	return nil
}
