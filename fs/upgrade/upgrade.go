// Package upgrade converts a volume's namespace from v1 (fs/namespace: one
// ordered log of changes) to v2 (fs/nsv2: one object per name) in place:
// ckptfs upgrade, as docs/namespace-v2.md §6 designs it. Files' data is not
// touched: a file's objects are under f/<file-id>/, and a name carries its
// file id from v1 to v2 unchanged; only names move.
//
// # Steps
//
//  1. Read the descriptor (with its ETag) and refuse a v2 volume
//     (ErrAlreadyV2). Open v1's namespace, its newest state.
//  2. Check that namespace v2 can hold that state (plan.go): no file
//     without a name left (an orphan, whose data only v1's cleaner knows to
//     delete), every name a dentry key, every node's attributes a binding
//     or an inode object, every ino below the first batch a v2 mount
//     claims, no node of more than nsv2.MaxLinks names. A refusal names
//     what stands in the way and changes nothing.
//  3. Fence the v1 log (namespace.Namespace.Fence): an entry at its next
//     seq, of an envelope version no v1 build knows, that no change lands
//     after. A running v1 mount's next change fails with EIO, its refresh
//     stops, both naming the upgrade. The state before the fence is the
//     newest v1 state for good; it is checked again (a mount may have made
//     a hard link between step 2 and the fence: then the fence is removed
//     and nothing else was written).
//  4. Write the root's attributes (see below), then every name of that
//     state as a v2 dentry (nsv2.Names.Bind: PUT
//     If-None-Match), Options.Parallel at once. Each name's change id is
//     derived from the fence's id and the directory and name (the ino for
//     an inode object), so a rerun finds its own dentry as Bind finds a lost answer's; one bound the
//     same way by any change counts too. Inos stay v1's: seq<<16|i, below
//     2^60 for any log under 2^44 entries, where v2 mounts claim batches
//     from 2^40 (inos from 2^60) on.
//  5. Replace the descriptor, If-Match the ETag of step 1, with layout
//     version 2 and "namespace": "v2" (volume.UpgradeDescriptor).
//
// A crash anywhere leaves either a v1 volume not fenced (before step 3), or
// a fenced one whose descriptor says 1 (v1 mounts are refused, naming
// ckptfs upgrade; v2 mounts are not made), or the v2 volume. Upgrade again
// finishes the second: it reads the same state up to the fence, and writes
// or finds every dentry. Run on the third it answers ErrAlreadyV2.
//
// The root's mode, owner, times and extended attributes are carried too,
// as v2's root object (nsv2.RootAttrs, ns2/root), written in step 4 before
// the names, If-None-Match, with a change id derived from the fence's: a
// rerun finds it written; one holding other attributes (not this upgrade's)
// is ErrConflict.
package upgrade

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// Errors a caller decides on (errors.Is). Each refusal before the fence
// changed nothing.
var (
	// ErrAlreadyV2: the volume's namespace is v2 already.
	ErrAlreadyV2 = errors.New("already namespace v2")
	// ErrRefused: namespace v2 cannot hold the v1 state as it is (the
	// error is a *RefusedError saying what stands in the way).
	ErrRefused = errors.New("namespace v1 state that namespace v2 cannot hold yet")
	// ErrConflict: a dentry at one of the names binds something else than
	// the v1 state says, or an inode object holds another node (written by
	// something other than an upgrade of this fence); the descriptor stays
	// at v1.
	ErrConflict = errors.New("namespace v2 holds another binding")
)

// Parallel is the default of Options.Parallel: the design's 64 in flight
// (100,000 names in about a minute on the general link).
const Parallel = 64

// Options tune Upgrade. The zero value is the default.
type Options struct {
	// Parallel bounds the dentries written at once; 0 is Parallel.
	Parallel int
	// Log receives the steps; nil logs nothing.
	Log *zap.Logger
	// Progress, if set, is called once per name written, with the count
	// written so far; calls come from several goroutines at once.
	Progress func(written int)
}

// Report is what an upgrade did.
type Report struct {
	// Fence is the seq of the fence in the v1 log; the state carried over
	// is the one after entry Fence-1.
	Fence uint64
	// Resumed: the log was fenced already, by an earlier run this one
	// finished.
	Resumed bool
	// Names written as dentries (or found written), by kind.
	Names, Dirs, Files, Symlinks, Others int
	// Linked: nodes of several names (hard links) written as inode objects
	// (or found written); their names are counted in Names.
	Linked int
	// Descriptor is the volume's new descriptor.
	Descriptor volume.Descriptor
}

// Upgrade converts the v1 volume at root of st to namespace v2 (see the
// package doc). A volume that is v2 already is ErrAlreadyV2; one without a
// descriptor volume.ErrNoVolume; a state v2 cannot hold a *RefusedError
// (ErrRefused). Any other error leaves the volume to be finished by
// Upgrade again.
func Upgrade(ctx context.Context, st staging.Store, root string, o Options) (*Report, error) {
	if o.Parallel <= 0 {
		o.Parallel = Parallel
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	d, etag, err := volume.ReadDescriptorETag(ctx, st, root)
	if err != nil {
		return nil, err
	}
	if d.NamespaceVersion() == config.NamespaceV2 {
		return nil, fmt.Errorf("volume %q: %w (layout version %d)", root, ErrAlreadyV2, d.LayoutVersion)
	}
	ns, err := namespace.Open(ctx, st, root, namespace.Options{ReadFenced: true})
	if err != nil {
		return nil, fmt.Errorf("upgrade: open namespace v1: %w", err)
	}
	defer ns.Close()
	rep := &Report{}

	p, err := makePlan(ctx, ns, root)
	if err != nil {
		return nil, err
	}
	if f := ns.Fenced(); f != nil {
		rep.Fence, rep.Resumed = f.Seq, true
		o.Log.Info("the namespace log is fenced already: finishing the upgrade", zap.Uint64("fence", f.Seq))
		if p.refused != nil {
			// A state that fails the checks was never carried over (it
			// does not change once fenced): the fence of a run that found
			// it so and could not remove it.
			return nil, unfence(ctx, ns, p.refused)
		}
	} else {
		if p.refused != nil {
			return nil, p.refused
		}
		seq, err := ns.Fence(ctx)
		if err != nil {
			return nil, fmt.Errorf("upgrade: %w", err)
		}
		rep.Fence = seq
		o.Log.Info("namespace log fenced", zap.Uint64("fence", seq), zap.Uint64("state", ns.Seq()))
		// What a v1 mount did between the plan and the fence.
		if p, err = makePlan(ctx, ns, root); err != nil {
			return nil, err
		}
		if p.refused != nil {
			return nil, unfence(ctx, ns, p.refused)
		}
	}
	f := ns.Fenced()
	if f == nil {
		return nil, fmt.Errorf("upgrade: the namespace log is no longer fenced: %w", namespace.ErrCorrupt)
	}
	if err := writeRoot(ctx, st, root, f.ID, p.root); err != nil {
		return nil, err
	}
	if err := writeInodes(ctx, st, root, f.ID, p.inodes, o, rep); err != nil {
		return nil, err
	}
	if err := bindAll(ctx, st, root, f.ID, p.names, o, rep); err != nil {
		return nil, err
	}
	nd, err := volume.UpgradeDescriptor(ctx, st, root, d, etag)
	if err != nil {
		return nil, fmt.Errorf("upgrade: every name is in namespace v2, the descriptor not replaced (upgrade again finishes it): %w", err)
	}
	rep.Descriptor = nd
	o.Log.Info("volume upgraded to namespace v2", zap.Int("names", rep.Names))
	return rep, nil
}

// unfence removes the fence this run found with a state it cannot carry
// over, and returns the refusal.
func unfence(ctx context.Context, ns *namespace.Namespace, refused *RefusedError) error {
	if err := ns.Unfence(ctx); err != nil {
		return fmt.Errorf("%w; and the fence could not be removed (upgrade again removes it): %v", refused, err)
	}
	refused.Unfenced = true
	return refused
}

// changeID is the change id of name in dir for the upgrade of fence: the
// same in every run, so that a rerun finds its own dentries.
func changeID(fence string, dir namespace.Ino, name string) string {
	h := sha256.New()
	fmt.Fprintf(h, "ckptfs upgrade\x00%s\x00%016x\x00", fence, uint64(dir))
	h.Write([]byte(name))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// inodeChangeID is the change id of node ino's inode object for the
// upgrade of fence: the same in every run.
func inodeChangeID(fence string, ino namespace.Ino) string {
	h := sha256.New()
	fmt.Fprintf(h, "ckptfs upgrade inode\x00%s\x00%016x", fence, uint64(ino))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// rootChangeID is the change id of the root's attributes for the upgrade
// of fence: the same in every run.
func rootChangeID(fence string) string {
	h := sha256.New()
	fmt.Fprintf(h, "ckptfs upgrade root\x00%s", fence)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// writeRoot stores the root's attributes r (its change id set here)
// If-None-Match. Refused, or failed, it reads the key: an object there
// with r's attributes (by any change id) is r written; another is
// ErrConflict; none after a failure is the failure. Before the descriptor
// is replaced no v2 mount changes the root, so an object with other
// attributes is not this upgrade's.
func writeRoot(ctx context.Context, st staging.Store, root, fence string, r *nsv2.RootAttrs) error {
	w := *r
	w.Change = rootChangeID(fence)
	body, err := nsv2.EncodeRoot(&w)
	if err != nil {
		return fmt.Errorf("upgrade: the root's attributes: %w", err)
	}
	key := nsv2.RootKey(root)
	_, perr := st.Put(ctx, key, body, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
	if perr == nil {
		return nil
	}
	cur, _, gerr := nsv2.ReadRoot(ctx, st, root)
	switch {
	case gerr != nil:
		return fmt.Errorf("upgrade: write the root's attributes: %w (not known whether stored: reading it back: %v)", perr, gerr)
	case cur == nil:
		return fmt.Errorf("upgrade: write the root's attributes: %w", perr)
	}
	ca, cb := *cur, w
	ca.Change, cb.Change = "", ""
	ja, err1 := json.Marshal(&ca)
	jb, err2 := json.Marshal(&cb)
	if err1 != nil || err2 != nil || !bytes.Equal(ja, jb) {
		return fmt.Errorf("upgrade: %s: %w: the root's attributes differ from v1's", staging.TruncKey(key), ErrConflict)
	}
	return nil
}

// writeInodes writes the inode object of every node of several names,
// o.Parallel at once, before any name binds one: a crash between leaves
// objects no name of a v2 mount reads (the descriptor is still v1), which
// the rerun finds written.
func writeInodes(ctx context.Context, st staging.Store, root, fence string, inodes []linked, o Options, rep *Report) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Parallel)
	for i := range inodes {
		l := &inodes[i]
		g.Go(func() error {
			in := *l.in
			in.Change = inodeChangeID(fence, in.Ino)
			if err := writeInode(gctx, st, root, &in); err != nil {
				return fmt.Errorf("upgrade: write the inode object of %s: %w", strings.Join(l.paths, " = "), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	rep.Linked = len(inodes)
	return nil
}

// writeInode stores in at its key If-None-Match. Refused, or failed, it
// reads the key: an object there with in's body (the same node, count and
// attributes, by any change id, neither locked) is in written; another is
// ErrConflict; none after a failure is the failure.
func writeInode(ctx context.Context, st staging.Store, root string, in *nsv2.Inode) error {
	key, err := nsv2.InodeKey(root, in.Ino)
	if err != nil {
		return err
	}
	body, err := nsv2.EncodeInode(in)
	if err != nil {
		return err
	}
	_, perr := st.Put(ctx, key, body, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
	if perr == nil {
		return nil
	}
	data, _, gerr := st.Get(ctx, key, staging.Whole())
	switch {
	case errors.Is(gerr, staging.ErrNotFound):
		return perr
	case gerr != nil:
		return fmt.Errorf("%w (not known whether stored: reading it back: %v)", perr, gerr)
	}
	cur, err := nsv2.DecodeInode(key, data)
	if err != nil {
		return fmt.Errorf("%s: %w", staging.TruncKey(key), err)
	}
	if !sameInode(cur, in) {
		return fmt.Errorf("%s: %w: node %d, %d names", staging.TruncKey(key), ErrConflict, cur.Ino, cur.Nlink)
	}
	return nil
}

// Waits of a bind that met its name locked, or its tombstone being deleted
// by a trim (nsv2.ErrLocked): as a mount's change waits (nsv2's
// lockwait.go), until ctx ends.
const (
	lockWaitFirst = 20 * time.Millisecond
	lockWaitMax   = time.Second
)

// bindWaiting binds it by change, waiting while nsv2.ErrLocked answers.
func bindWaiting(ctx context.Context, prim *nsv2.Names, it *item, change string) error {
	wait := lockWaitFirst
	for {
		_, err := prim.Bind(ctx, it.dir, rootFrags, it.name, change, it.b)
		if !errors.Is(err, nsv2.ErrLocked) {
			return err
		}
		tm := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return err
		case <-tm.C:
		}
		wait = min(2*wait, lockWaitMax)
	}
}

// bindAll writes every name as a dentry, o.Parallel at once.
func bindAll(ctx context.Context, st staging.Store, root, fence string, names []item, o Options, rep *Report) error {
	prim := nsv2.New(st, root, nil)
	var written atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Parallel)
	for i := range names {
		it := &names[i]
		g.Go(func() error {
			err := bindWaiting(gctx, prim, it, changeID(fence, it.dir, it.name))
			var ne *nsv2.NameError
			if errors.As(err, &ne) && errors.Is(err, namespace.ErrExist) && ne.Dentry != nil && sameBinding(ne.Dentry.Bound, it.b) {
				err = nil // bound so already, by another change
			}
			if errors.As(err, &ne) && errors.Is(err, namespace.ErrExist) {
				err = fmt.Errorf("%s: %w: %w", it.path, ErrConflict, err)
			}
			if err != nil {
				return fmt.Errorf("upgrade: write the name %s: %w", it.path, err)
			}
			n := written.Add(1)
			if o.Progress != nil {
				o.Progress(int(n))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, it := range names {
		rep.Names++
		switch it.b.Kind {
		case namespace.KindDir:
			rep.Dirs++
		case namespace.KindFile:
			rep.Files++
		case namespace.KindSymlink:
			rep.Symlinks++
		default:
			rep.Others++
		}
	}
	return nil
}
