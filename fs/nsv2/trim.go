package nsv2

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// Trimming (docs/namespace-v2.md §5): what a change leaves beside the live
// names goes once older than TrimGrace, so that ns2/ holds the live names,
// the inode batches, seals and leases in use, the orphan records of files
// not yet reaped, and at most TrimGrace of history:
//
//   - A decision (ns2/tx/) older than the grace goes once no dentry or
//     inode object of its op list is locked by its change: a lock whose
//     decision is gone reads as a change never decided, and would be
//     aborted after TxGrace though it committed. A name or inode object
//     still locked by it (its coordinator died after deciding, and no
//     reader came) is resolved from the decision, as a reader does
//     (Names.Resolve, ResolveInode), and the decision goes at a later
//     trim. Each dentry of the op list that its change resolved and that
//     still carries the op list loses it first (a PUT If-Match of the same
//     dentry without it), so that no op list outlives its decision.
//   - A tombstone older than the grace goes, unless an orphan record names
//     it (the cleaner reads there that its unlink landed; the record goes
//     when the file is reaped, and the tombstone at the next trim). It is
//     marked first: rewritten If-Match the ETag judged as a reaping
//     tombstone (Dentry.Reap, a fresh id), then deleted at once. The store
//     has no conditional DELETE, but nothing is written over a reaping
//     tombstone (readers take it as a tombstone; a create, lock or link
//     that meets one waits for it to go, then writes If-None-Match), so
//     the DELETE deletes the mark and nothing else; a create that landed
//     before the mark refuses it, and the name stays. A reaping tombstone
//     left by a trim that stopped between the two is old at a later trim,
//     marked again (its ETag changes with the id) and deleted; until then
//     a create of that name waits, and past its deadline answers EBUSY.
//     What is left: a DELETE that reaches the store twice (a copy held up
//     in the network, or resent by the client after its answer was lost)
//     after a create that followed the first; the store's client gives up
//     on a request within seconds, as the leases assume (lease.go).
//   - A lease not written for the grace goes only when its directory's
//     removal committed (its seal is there, decided commit): a holder that
//     renews it reads that seal next and adds no name, so a renewal deleted
//     with it loses nothing. Any other lease is its holder's to delete
//     (at its next renewal of another lease, or Close): a trim deleting a
//     live directory's lease could delete a renewal landing between its
//     HEAD and DELETE, and a remover would not wait for a lease its holder
//     believes held. One left by a mount that died stays until its
//     directory is removed (each removal of it waits LeaseTerm for it).
//   - The decision a seal names stays: a seal reads as one unless its
//     change is decided abort, and a remover whose removal aborted leaves
//     its seal (lease.go's unseal). Its names are released as any
//     decision's (a lock resolved, the op list taken off), so that the
//     removed directory's name goes as any tombstone; each trim reads
//     every such decision again.
//
// A decision is deleted after a HEAD showing the ETag judged: nothing
// writes a decision again (it is written If-None-Match under a fresh id).
// TrimGrace must exceed the longest a change of several names runs (the
// operation's deadline): a coordinator slower than that could commit
// after its abort was trimmed.
//
// A mount away for longer than the grace drops its cache at its next call
// (gap.go), so that no trimmed object is used from it.

// TrimOptions are a trim's.
type TrimOptions struct {
	// Grace: TrimGrace when 0.
	Grace time.Duration
	// Now is the clock read against the store's LastModified (time.Now
	// when nil).
	Now func() time.Time
	// DryRun deletes and rewrites nothing; the report says what would go.
	DryRun bool
	// Fence, when set, is called before each kind of deletion; an error
	// stops the trim there and is returned.
	Fence func(ctx context.Context) error
}

// Trimmed is one object a trim deleted (or would delete), or rewrote.
type Trimmed struct {
	Key    string
	Size   int64
	Reason string
}

// TrimReport says what a trim did.
type TrimReport struct {
	Deleted   []Trimmed
	Rewritten []Trimmed // dentries whose op list went
	Damaged   []Trimmed // left alone: they do not decode
	Kept      int       // decisions kept: a name is still locked by their change, or a seal names it
}

// Trim deletes the history under root's ns2/ older than o.Grace (see
// above). Its cost: one LIST per 1,000 decisions, leases, orphan records
// and dentries, and per 1,000 seals; a GET of each seal and of each
// decision older than the grace and of each dentry or inode object of its
// op list; a GET of each orphan record; a GET of each dentry older than the
// grace no larger than a reaping tombstone of its name, and a PUT and a
// DELETE of each tombstone trimmed; a GET of the seal and decision of each
// directory with a lease older than the grace.
func Trim(ctx context.Context, st staging.Store, root string, o TrimOptions) (*TrimReport, error) {
	if o.Grace <= 0 {
		o.Grace = TrimGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tr := &trimmer{st: st, root: root, o: o, rep: &TrimReport{}}
	for _, step := range []func(context.Context) error{tr.decisions, tr.tombstones, tr.leases} {
		if o.Fence != nil {
			if err := o.Fence(ctx); err != nil {
				return tr.rep, err
			}
		}
		if err := step(ctx); err != nil {
			return tr.rep, err
		}
	}
	return tr.rep, nil
}

type trimmer struct {
	st   staging.Store
	root string
	o    TrimOptions
	rep  *TrimReport
}

func (tr *trimmer) old(info staging.ObjectInfo) bool {
	return !info.LastModified.IsZero() && tr.o.Now().Sub(info.LastModified) > tr.o.Grace
}

// deleteSame deletes key if it still has etag (a HEAD first; see Trim).
func (tr *trimmer) deleteSame(ctx context.Context, key, etag string, size int64, reason string) error {
	if !tr.o.DryRun {
		info, err := tr.st.Head(ctx, key)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("trim %s: %w", staging.TruncKey(key), err)
		case info.ETag != etag:
			return nil // written since: not the object judged
		}
		if err := tr.st.Delete(ctx, key); err != nil {
			return fmt.Errorf("trim %s: %w", staging.TruncKey(key), err)
		}
	}
	tr.rep.Deleted = append(tr.rep.Deleted, Trimmed{Key: key, Size: size, Reason: reason})
	return nil
}

// decisions trims the decisions older than the grace whose dentries are
// no longer locked by them, stripping their op lists from those dentries
// first.
func (tr *trimmer) decisions(ctx context.Context) error {
	sealed, err := tr.sealTxs(ctx)
	if err != nil {
		return err
	}
	prefix := rootPrefix(tr.root) + dirPrefix + "tx/"
	objs, err := staging.ListAll(ctx, tr.st, prefix)
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	for _, obj := range objs {
		if !tr.old(obj) {
			continue
		}
		x, info, err := read(ctx, tr.st, obj.Key, kindDecision, DecodeDecision)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			continue
		case errors.Is(err, namespace.ErrCorrupt):
			tr.rep.Damaged = append(tr.rep.Damaged, Trimmed{Key: obj.Key, Size: obj.Size, Reason: err.Error()})
			continue
		case err != nil:
			return err
		}
		// A seal's decision stays (sealTxs), but its names are released
		// as any decision's: the removed directory's name, once its op
		// list is off, is a tombstone the next trim deletes.
		free, err := tr.release(ctx, x)
		if err != nil {
			return err
		}
		if !free || sealed[x.Tx] {
			tr.rep.Kept++
			continue
		}
		if err := tr.deleteSame(ctx, obj.Key, info.ETag, obj.Size, "decision of a change older than the trim grace, its names resolved"); err != nil {
			return err
		}
	}
	return nil
}

// release checks each dentry of x's op list: free is false while one is
// locked by x's change (or cannot be read); one resolved by it that still
// carries its op list loses it.
func (tr *trimmer) release(ctx context.Context, x *Decision) (free bool, err error) {
	free = true
	for i := range x.Ops {
		op := &x.Ops[i]
		if op.Ino != 0 {
			// An inode object (hard links, inode.go): locked by the change
			// as a dentry is, and resolved the same way; its resolution
			// keeps no op list.
			key, err := InodeKey(tr.root, op.Ino)
			if err != nil {
				return false, nil
			}
			in, _, err := read(ctx, tr.st, key, kindInode, DecodeInode)
			switch {
			case errors.Is(err, staging.ErrNotFound):
			case errors.Is(err, namespace.ErrCorrupt):
				tr.rep.Damaged = append(tr.rep.Damaged, Trimmed{Key: key, Reason: err.Error()})
				free = false
			case err != nil:
				return false, err
			case in.Change != x.Tx || in.Lock == nil:
			case tr.o.DryRun:
				free = false
			default:
				if _, err := New(tr.st, tr.root, tr.o.Now).ResolveInode(ctx, op.Ino); err != nil && !errors.Is(err, namespace.ErrCorrupt) {
					return false, err
				}
				free = false
			}
			continue
		}
		key, err := DentryKey(tr.root, op.Dir, op.Frags, string(op.Name))
		if err != nil {
			return false, nil // decoded ops make keys; kept, to be safe
		}
		d, info, err := read(ctx, tr.st, key, kindDentry, DecodeDentry)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			continue
		case errors.Is(err, namespace.ErrCorrupt):
			tr.rep.Damaged = append(tr.rep.Damaged, Trimmed{Key: key, Reason: err.Error()})
			free = false
			continue
		case err != nil:
			return false, err
		case d.Change != x.Tx:
			continue // changed since by another change
		case d.Lock != nil && tr.o.DryRun:
			free = false
			continue
		case d.Lock != nil:
			// Still locked by it (its coordinator died after deciding, and
			// no reader came): resolve it as a reader does, from the
			// decision, and look again at the next trim.
			if _, err := New(tr.st, tr.root, tr.o.Now).Resolve(ctx, op.Dir, op.Frags, string(op.Name)); err != nil && !errors.Is(err, namespace.ErrCorrupt) {
				return false, err
			}
			free = false
			continue
		case len(d.Ops) == 0:
			continue
		}
		stripped := *d
		stripped.Ops = nil
		if tr.o.DryRun {
			tr.rep.Rewritten = append(tr.rep.Rewritten, Trimmed{Key: key, Reason: "op list of a change older than the trim grace"})
			continue
		}
		body, err := EncodeDentry(&stripped)
		if err != nil {
			return false, err
		}
		_, err = tr.st.Put(ctx, key, body, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}})
		switch {
		case errors.Is(err, staging.ErrPrecondition):
			free = false // changed since it was read: the next trim sees
		case err != nil:
			return false, fmt.Errorf("trim the op list of %s: %w", staging.TruncKey(key), err)
		default:
			tr.rep.Rewritten = append(tr.rep.Rewritten, Trimmed{Key: key, Reason: "op list of a change older than the trim grace"})
		}
	}
	return free, nil
}

// maxTombstoneLen is the largest a tombstone of dn can be: a dentry with
// no binding, lock or op list, of the longest fragment count, marked
// reaping. A bound name's dentry with its attributes is larger, so only
// dentries at most this long are read (a name of a node of several names,
// whose binding is short, may be read for nothing).
func maxTombstoneLen(dn DentryName) int {
	id := strings.Repeat("0", idDigits)
	body, err := EncodeDentry(&Dentry{Dir: dn.Dir, Frags: MaxFrags, Name: Name(dn.Name), Change: id, Reap: id})
	if err != nil {
		return 0
	}
	return len(body)
}

// tombstones trims the tombstones older than the grace that no orphan
// record names.
func (tr *trimmer) tombstones(ctx context.Context) error {
	keep, err := tr.recordNames(ctx)
	if err != nil {
		return err
	}
	prefix := DentriesPrefix(tr.root)
	after := ""
	for {
		page, err := tr.st.List(ctx, prefix, after, staging.MaxListKeys)
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, obj := range page.Objects {
			if !tr.old(obj) {
				continue
			}
			_, dn, err := ParseDentryKey(obj.Key)
			if err != nil || obj.Size > int64(maxTombstoneLen(dn)) {
				continue
			}
			d, info, err := read(ctx, tr.st, obj.Key, kindDentry, DecodeDentry)
			switch {
			case errors.Is(err, staging.ErrNotFound):
				continue
			case errors.Is(err, namespace.ErrCorrupt):
				tr.rep.Damaged = append(tr.rep.Damaged, Trimmed{Key: obj.Key, Size: obj.Size, Reason: err.Error()})
				continue
			case err != nil:
				return err
			case !d.Tombstone() || len(d.Ops) > 0 || !tr.old(info) || keep[obj.Key] == d.Change:
				continue
			}
			if err := tr.reap(ctx, obj.Key, d, info.ETag, obj.Size); err != nil {
				return err
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// reap deletes tombstone d, read from key with etag: it marks it first (a
// reaping tombstone with a fresh id, one PUT If-Match etag), then deletes
// it at once. Nothing is written over a reaping tombstone (its readers
// wait for it to go), so the unconditional DELETE deletes the mark and
// nothing else; a tombstone changed since it was read refuses the mark and
// stays. A reaping tombstone left by a trim that stopped between its two
// requests is old by then and marked again here (a fresh id: its ETag
// changes, as this trim's If-Match needs).
func (tr *trimmer) reap(ctx context.Context, key string, d *Dentry, etag string, size int64) error {
	const reason = "tombstone older than the trim grace"
	if tr.o.DryRun {
		tr.rep.Deleted = append(tr.rep.Deleted, Trimmed{Key: key, Size: size, Reason: reason})
		return nil
	}
	marked := *d
	marked.Reap = newID()
	body, err := EncodeDentry(&marked)
	if err != nil {
		return err
	}
	r, err := put(ctx, tr.st, key, body, staging.Conditions{IfMatch: etag}, kindDentry, DecodeDentry,
		func(cur *Dentry) bool { return cur.Reap == marked.Reap })
	switch {
	case err != nil:
		return fmt.Errorf("trim %s: mark it: %w", staging.TruncKey(key), err)
	case !r.landed:
		return nil // written since: not the tombstone judged
	}
	if err := tr.st.Delete(ctx, key); err != nil {
		return fmt.Errorf("trim %s: %w", staging.TruncKey(key), err)
	}
	tr.rep.Deleted = append(tr.rep.Deleted, Trimmed{Key: key, Size: size, Reason: reason})
	return nil
}

// recordNames is the dentry key each orphan record names, with the change
// the record is of.
func (tr *trimmer) recordNames(ctx context.Context) (map[string]string, error) {
	prefix := OrphansPrefix(tr.root)
	objs, err := staging.ListAll(ctx, tr.st, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	out := map[string]string{}
	for _, obj := range objs {
		rec, _, err := read(ctx, tr.st, obj.Key, kindOrphan, DecodeOrphan)
		switch {
		case errors.Is(err, staging.ErrNotFound), errors.Is(err, namespace.ErrCorrupt):
			continue // a damaged record is the cleaner's to report
		case err != nil:
			return nil, err
		}
		if key, err := DentryKey(tr.root, rec.Dir, rec.Frags, string(rec.Name)); err == nil {
			out[key] = rec.Change
		}
	}
	return out, nil
}

// leases trims the leases not written for the grace on directories whose
// removal committed: the seal of a committed removal is there for good, so
// a mount that renews such a lease reads it next and adds no name; its
// renewal deleted by the trim loses nothing. A lease on any other
// directory is its holder's to delete (a renewal landing between the
// trim's HEAD and DELETE would be deleted while its holder believes it
// holds it, and a remover would then not wait for it), so it stays.
func (tr *trimmer) leases(ctx context.Context) error {
	prefix := rootPrefix(tr.root) + dirPrefix + "lease/"
	objs, err := staging.ListAll(ctx, tr.st, prefix)
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	removed := map[namespace.Ino]bool{}
	for _, obj := range objs {
		if !tr.old(obj) || tr.o.Now().Sub(obj.LastModified) <= LeaseTerm {
			continue
		}
		_, dir, _, err := ParseLeaseKey(obj.Key)
		if err != nil {
			continue
		}
		gone, ok := removed[dir]
		if !ok {
			if gone, err = tr.removedDir(ctx, dir); err != nil {
				return err
			}
			removed[dir] = gone
		}
		if !gone {
			continue
		}
		if err := tr.deleteSame(ctx, obj.Key, obj.ETag, obj.Size, "create lease on a removed directory, not renewed for the trim grace"); err != nil {
			return err
		}
	}
	return nil
}

// removedDir says whether dir's removal committed: its seal is there, a
// removal's, and its change's decision is commit (the trim keeps the
// decision a seal names, sealTxs).
func (tr *trimmer) removedDir(ctx context.Context, dir namespace.Ino) (bool, error) {
	key, err := SealKey(tr.root, dir)
	if err != nil {
		return false, nil
	}
	s, _, err := read(ctx, tr.st, key, kindSeal, DecodeSeal)
	switch {
	case errors.Is(err, staging.ErrNotFound), errors.Is(err, namespace.ErrCorrupt):
		return false, nil
	case err != nil:
		return false, err
	}
	xkey, err := DecisionKey(tr.root, s.Tx)
	if err != nil {
		return false, nil
	}
	x, _, err := read(ctx, tr.st, xkey, kindDecision, DecodeDecision)
	switch {
	case errors.Is(err, staging.ErrNotFound), errors.Is(err, namespace.ErrCorrupt):
		return false, nil
	case err != nil:
		return false, err
	}
	// A change of the fragment count committed leaves the directory live
	// (frags.go): its leases are their holders'.
	return x.Outcome == Commit && s.Frags == 0, nil
}

// sealTxs is the change of each seal: their decisions stay. A seal reads
// as one while its change is not decided abort (lease.go's sealed): the
// abort of a removal whose seal is left (its remover no longer deletes it)
// must outlive the seal, or the directory would read as removed.
func (tr *trimmer) sealTxs(ctx context.Context) (map[string]bool, error) {
	prefix := rootPrefix(tr.root) + dirPrefix + "seal/"
	objs, err := staging.ListAll(ctx, tr.st, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	out := map[string]bool{}
	for _, obj := range objs {
		s, _, err := read(ctx, tr.st, obj.Key, kindSeal, DecodeSeal)
		switch {
		case errors.Is(err, staging.ErrNotFound), errors.Is(err, namespace.ErrCorrupt):
			continue // fsck reports a damaged one
		case err != nil:
			return nil, err
		}
		out[s.Tx] = true
	}
	return out, nil
}
