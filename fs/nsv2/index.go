package nsv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The cleaner's view of a volume's names (docs/namespace-v2.md §5): which
// files lost their last name, judged from the orphan records, and which
// files a name binds, from a listing of every dentry when a record alone
// cannot tell. A mount's Tree answers for the names it has seen; the
// cleaner has seen none, and must never take a named file for an orphan.

// RecordState is what the cleaner makes of one orphan record.
type RecordState int

const (
	// RecordKept: not decided this run: the record is younger than the
	// grace and its name still binds the file (an unlink in flight), its
	// name is locked by a change in progress, or the listing of names it
	// needed could not be trusted (a damaged dentry).
	RecordKept RecordState = iota
	// RecordOrphan: the file has no name: its unlink's tombstone (or the
	// rename over it) landed, or no dentry binds it.
	RecordOrphan
	// RecordStale: the file still has a name, and the record is older
	// than the grace: its unlink never landed (a crash between the record
	// and the tombstone), and the record goes.
	RecordStale
	// RecordDamaged: the record does not decode; it is reported and left.
	RecordDamaged
)

// Record is one orphan record as judged.
type Record struct {
	Key      string
	FileID   string
	Modified time.Time // the record's LastModified
	Orphan   *Orphan   // nil when damaged
	State    RecordState
	Err      error // RecordDamaged: why; RecordKept: why, when an error decided it
}

// Index answers the cleaner's questions about names under one root. The
// listing of every dentry it may need (Named) is made once, on first use,
// and kept: its cost is one LIST per 1,000 dentries and one GET of each
// dentry, up to parallel at once. A gc that meets no ambiguous record and
// no file without a head never makes it.
type Index struct {
	st       staging.Store
	root     string
	parallel int
	// Resolve: a record whose name is locked by a change of several
	// names resolves the lock as a reader does (Names.Resolve: it may
	// write the decision abort after TxGrace, and the lock's resolution).
	// Off, the record waits for a reader (a dry run, fsck).
	Resolve bool

	buildMu sync.Mutex // held across the listing, made once
	mu      sync.Mutex
	built   bool
	named   map[string]bool // GUARDED_BY(mu): file ids a dentry binds (or a lock will)
	damaged []string        // GUARDED_BY(mu): dentries that did not decode
	several bool            // GUARDED_BY(mu): a binding of a node of several names was met
}

// NewIndex is the Index of the names under root in st.
func NewIndex(st staging.Store, root string) *Index {
	return &Index{st: st, root: root, parallel: 32}
}

// OrphansPrefix is the prefix of the orphan records under root.
func OrphansPrefix(root string) string { return rootPrefix(root) + dirPrefix + "orphan/" }

// DentriesPrefix is the prefix of every dentry under root.
func DentriesPrefix(root string) string { return rootPrefix(root) + dirPrefix + "d/" }

// Records lists the orphan records (one LIST per 1,000) and judges those
// of the files want takes (nil: all): a GET of the record and of the
// dentry it names, and the listing of names when that dentry no longer
// says. grace is how old a record whose name still binds its file must be
// to be stale; now is the clock it is read against (the store's
// LastModified).
func (x *Index) Records(ctx context.Context, grace time.Duration, now time.Time, want func(fileID string) bool) ([]Record, error) {
	objs, err := staging.ListAll(ctx, x.st, OrphansPrefix(x.root))
	if err != nil {
		return nil, fmt.Errorf("list orphan records: %w", err)
	}
	out := make([]Record, 0, len(objs))
	for _, o := range objs {
		r := Record{Key: o.Key, Modified: o.LastModified}
		_, id, err := ParseOrphanKey(o.Key)
		if err != nil {
			r.State, r.Err = RecordDamaged, err
			out = append(out, r)
			continue
		}
		r.FileID = id
		if want != nil && !want(id) {
			continue
		}
		if err := x.judge(ctx, &r, grace, now); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Record judges the orphan record of fileID; ok is false when there is
// none.
func (x *Index) Record(ctx context.Context, fileID string, grace time.Duration, now time.Time) (r Record, ok bool, err error) {
	key, err := OrphanKey(x.root, fileID)
	if err != nil {
		return Record{}, false, fmt.Errorf("file %q: %w", fileID, namespace.ErrInvalid)
	}
	info, err := x.st.Head(ctx, key)
	if errors.Is(err, staging.ErrNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read %s: %w", staging.TruncKey(key), err)
	}
	r = Record{Key: key, FileID: fileID, Modified: info.LastModified}
	if err := x.judge(ctx, &r, grace, now); err != nil {
		return Record{}, false, err
	}
	return r, true, nil
}

// judge reads r's record and the dentry it names, and decides (see
// RecordState). An error is one the run cannot go on after (the store's);
// what is only this record's is its state.
func (x *Index) judge(ctx context.Context, r *Record, grace time.Duration, now time.Time) error {
	rec, info, err := read(ctx, x.st, r.Key, kindOrphan, DecodeOrphan)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		r.State = RecordKept // gone since the listing: forgotten by another run
		r.Err = err
		return nil
	case errors.Is(err, namespace.ErrCorrupt):
		r.State, r.Err = RecordDamaged, err
		return nil
	case err != nil:
		return err
	}
	r.Orphan, r.Modified = rec, info.LastModified
	key, err := DentryKey(x.root, rec.Dir, rec.Frags, string(rec.Name))
	if err != nil {
		r.State, r.Err = RecordDamaged, err
		return nil
	}
	d, _, err := read(ctx, x.st, key, kindDentry, DecodeDentry)
	if err == nil && d.Lock != nil && x.Resolve {
		// Locked by a change of several names (a rename over the file):
		// resolve it as a reader does, so that a change whose mount died
		// does not keep the record undecided for good; a lock younger
		// than TxGrace and undecided stays.
		if _, err := New(x.st, x.root, func() time.Time { return now }).Resolve(ctx, rec.Dir, rec.Frags, string(rec.Name)); err != nil && !errors.Is(err, namespace.ErrCorrupt) {
			return err
		}
		d, _, err = read(ctx, x.st, key, kindDentry, DecodeDentry)
	}
	switch {
	case errors.Is(err, staging.ErrNotFound):
		d = nil // trimmed, or never made: the listing tells
	case errors.Is(err, namespace.ErrCorrupt):
		r.State, r.Err = RecordKept, err
		return nil
	case err != nil:
		return err
	}
	old := now.Sub(r.Modified) > grace
	switch {
	case d != nil && d.Lock != nil:
		// A change of several names holds it: what it binds is decided
		// by that change; the next run sees.
		r.State = RecordKept
		return nil
	case d != nil && d.Bound != nil && d.Bound.Ino == rec.Ino:
		// The tombstone did not land (yet).
		r.State = RecordKept
		if old {
			r.State = RecordStale
		}
		return nil
	case d != nil && d.Change == rec.Change:
		// The record's own change removed the name (an unlink's
		// tombstone, a rename over the file, the last name of a node of
		// several names): the file has no other name unless its inode
		// object still counts one (a record of a change that took the
		// node's last name and did not land, the node linked since).
		named, ok, err := x.inodeNames(ctx, rec.Ino, now)
		switch {
		case err != nil:
			return err
		case !ok:
			r.State, r.Err = RecordKept, fmt.Errorf("the inode object of node %d is damaged or locked by a change", rec.Ino)
		case named && old:
			r.State = RecordStale
		case named:
			r.State = RecordKept
		default:
			r.State = RecordOrphan
		}
		return nil
	}
	// The name says nothing of the record's change: trimmed, made again
	// since, or the file left it another way (a rename after a crashed
	// unlink). Only the names can tell.
	named, err := x.Named(ctx, rec.FileID)
	switch {
	case errors.Is(err, ErrIncomplete):
		r.State, r.Err = RecordKept, err
	case err != nil:
		return err
	case named && old:
		r.State = RecordStale
	case named:
		r.State = RecordKept
	default:
		r.State = RecordOrphan
	}
	return nil
}

// ErrIncomplete: the listing of names met a damaged dentry, or a name of a
// node of several names whose inode object it could not read, so it cannot
// say that a file is not named.
var ErrIncomplete = errors.New("the listing of names cannot tell: a dentry or an inode object is damaged, or a name's inode object is missing")

// Named says whether a dentry binds file fileID, or a lock will: from a
// listing of every dentry, made at the first call, and of the inode object
// of each node of several names it met (whose names bind its ino only: the
// file id is in the object). When that listing met a damaged dentry or
// inode object, or a name whose inode object is missing, a file it does not
// find is not known to be unnamed: the error wraps ErrIncomplete, and a
// caller keeps the file.
func (x *Index) Named(ctx context.Context, fileID string) (bool, error) {
	if err := x.build(ctx); err != nil {
		return false, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.named[fileID] {
		return true, nil
	}
	if len(x.damaged) > 0 || x.several {
		return false, fmt.Errorf("is file %s named: %w", fileID, ErrIncomplete)
	}
	return false, nil
}

// Damaged is the keys of the dentries the listing of names found damaged
// (empty until Named was called).
func (x *Index) Damaged() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.damaged...)
}

// build lists every dentry and reads each, once.
func (x *Index) build(ctx context.Context) error {
	x.buildMu.Lock()
	defer x.buildMu.Unlock()
	x.mu.Lock()
	built := x.built
	x.mu.Unlock()
	if built {
		return nil
	}
	named := map[string]bool{}
	var damaged []string
	several := false
	linked := map[namespace.Ino]string{} // nodes of several names met: ino -> a name's key
	var mu sync.Mutex
	err := eachDentry(ctx, x.st, x.root, x.parallel, func(key string, _ staging.ObjectInfo, d *Dentry, err error) error {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			damaged = append(damaged, key)
			return nil
		}
		for _, b := range []*Binding{d.Bound, lockTo(d)} {
			switch {
			case b == nil:
			case b.Node == nil:
				if b.Kind == namespace.KindFile {
					linked[b.Ino] = key
				}
			case b.Node.FileID != "":
				named[b.Node.FileID] = true
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list the names under %q: %w", x.root, err)
	}
	// A name of a node of several names binds its ino only: the file id is
	// in the node's inode object, read once per node. One that cannot be
	// read as an object in force (none, damaged) leaves the listing unable
	// to say a file is unnamed.
	if err := x.readLinked(ctx, linked, func(ino namespace.Ino, in *Inode, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, namespace.ErrCorrupt):
			k, _ := InodeKey(x.root, ino)
			damaged = append(damaged, k)
		case err != nil || in == nil:
			several = true
		default:
			for _, b := range []*Inode{in, in.Lock} {
				if b != nil && b.Node.FileID != "" {
					named[b.Node.FileID] = true
				}
			}
		}
	}); err != nil {
		return fmt.Errorf("list the names under %q: %w", x.root, err)
	}
	x.mu.Lock()
	x.built, x.named, x.damaged, x.several = true, named, damaged, several
	x.mu.Unlock()
	return nil
}

// readLinked reads the inode object of each node of linked (up to parallel
// at once) and calls fn with it (nil: none) or the error that made it
// unreadable (namespace.ErrCorrupt: damaged). Any other failure to read
// stops it. A locked object is taken as stored: its body and its lock's
// both name the node's file.
func (x *Index) readLinked(ctx context.Context, linked map[namespace.Ino]string, fn func(namespace.Ino, *Inode, error)) error {
	sem := make(chan struct{}, max(x.parallel, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for ino := range linked {
		key, err := InodeKey(x.root, ino)
		if err != nil {
			fn(ino, nil, &namespace.CorruptError{Key: linked[ino], Reason: err.Error()})
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			in, _, err := read(ctx, x.st, key, kindInode, DecodeInode)
			switch {
			case errors.Is(err, staging.ErrNotFound):
				fn(ino, nil, nil)
			case err == nil, errors.Is(err, namespace.ErrCorrupt):
				fn(ino, in, err)
			default:
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// inodeNames says whether node ino has an inode object in force (counting
// a name). ok is false when it cannot tell: the object is damaged, or
// locked by a change of several names (resolved first as a reader does
// when x.Resolve; one still locked waits for the next run); err is the
// store's.
func (x *Index) inodeNames(ctx context.Context, ino namespace.Ino, now time.Time) (named, ok bool, err error) {
	key, err := InodeKey(x.root, ino)
	if err != nil {
		return false, false, nil
	}
	in, _, err := read(ctx, x.st, key, kindInode, DecodeInode)
	if err == nil && in.Lock != nil && x.Resolve {
		if _, err := New(x.st, x.root, func() time.Time { return now }).ResolveInode(ctx, ino); err != nil && !errors.Is(err, namespace.ErrCorrupt) {
			return false, false, err
		}
		in, _, err = read(ctx, x.st, key, kindInode, DecodeInode)
	}
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return false, true, nil
	case errors.Is(err, namespace.ErrCorrupt):
		return false, false, nil
	case err != nil:
		return false, false, err
	case in.Lock != nil:
		return false, false, nil
	}
	return in.Nlink > 0, true, nil
}

func lockTo(d *Dentry) *Binding {
	if d.Lock == nil {
		return nil
	}
	return d.Lock.To
}

// eachDentry lists every dentry under root, page by page, and reads each
// (up to parallel at once), calling fn with the dentry or the error that
// made it unreadable as a dentry (a damaged one: namespace.ErrCorrupt, or a
// key that is not a dentry's). A dentry gone since the listing is skipped.
// Any other failure to read stops it.
func eachDentry(ctx context.Context, st staging.Store, root string, parallel int,
	fn func(key string, info staging.ObjectInfo, d *Dentry, err error) error) error {
	prefix := DentriesPrefix(root)
	after := ""
	for {
		page, err := st.List(ctx, prefix, after, staging.MaxListKeys)
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		errs := make([]error, len(page.Objects))
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for i, o := range page.Objects {
			if _, _, err := ParseDentryKey(o.Key); err != nil {
				errs[i] = fn(o.Key, o, nil, &namespace.CorruptError{Key: o.Key, Reason: err.Error()})
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				d, info, err := read(ctx, st, o.Key, kindDentry, DecodeDentry)
				switch {
				case errors.Is(err, staging.ErrNotFound):
				case errors.Is(err, namespace.ErrCorrupt):
					errs[i] = fn(o.Key, o, nil, err)
				case err != nil:
					errs[i] = err
				default:
					errs[i] = fn(o.Key, info, d, nil)
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// DeleteRecord deletes file fileID's orphan record if it is still the one
// of change (read again first: a record written since by another change
// of the file stays). A record gone already is no error.
func (x *Index) DeleteRecord(ctx context.Context, fileID, change string) error {
	key, err := OrphanKey(x.root, fileID)
	if err != nil {
		return err
	}
	rec, _, err := read(ctx, x.st, key, kindOrphan, DecodeOrphan)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("delete the orphan record of %s: %w", fileID, err)
	case rec.Change != change:
		return nil
	}
	if err := x.st.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete the orphan record of %s: %w", fileID, err)
	}
	return nil
}

// Forget drops file fileID once the cleaner reaped it (its record, of
// change, judged an orphan's): the inode object of its node ino first, when
// there is one out of force (Nlink 0, not locked: the last name of a node
// of several names went, and nothing writes it again), then the record, if
// still the one of change. In that order a run that stops between leaves
// the record, and the next run forgets the file again; the other way an
// inode object would be left with nothing to name it.
func (x *Index) Forget(ctx context.Context, fileID, change string, ino namespace.Ino) error {
	if key, err := InodeKey(x.root, ino); err == nil {
		in, _, err := read(ctx, x.st, key, kindInode, DecodeInode)
		switch {
		case errors.Is(err, staging.ErrNotFound), errors.Is(err, namespace.ErrCorrupt):
			// none, or damaged: fsck reports it; the record goes
		case err != nil:
			return fmt.Errorf("forget file %s: %w", fileID, err)
		case in.Nlink > 0 || in.Lock != nil:
			return fmt.Errorf("forget file %s: node %d's inode object counts a name: %w", fileID, ino, namespace.ErrInvalid)
		default:
			if err := x.st.Delete(ctx, key); err != nil {
				return fmt.Errorf("forget file %s: delete %s: %w", fileID, staging.TruncKey(key), err)
			}
		}
	}
	return x.DeleteRecord(ctx, fileID, change)
}
