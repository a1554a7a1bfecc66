package nsv2

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// Finding is one thing Check found, with the object's key.
type Finding struct {
	Key string
	Err error
}

func (f Finding) String() string { return f.Key + ": " + f.Err.Error() }

// CheckReport is what Check found under a volume's ns2/.
type CheckReport struct {
	Objects int // objects under ns2/
	// Files: regular files with a name: each name bound to a file of one
	// name, and each inode object in force of a file of several names
	// (counted once, however many names it has).
	Files int
	// Linked: names of a node of several names (each binds the node's
	// ino; the node's attributes are in its inode object, checked to be
	// there and to decode).
	Linked     int
	Dirs       int // names bound to a directory
	Others     int // names bound to a symlink, FIFO, socket or device
	Tombstones int
	Locked     int // names locked by a change of several names
	Records    int // orphan records
	// Problems are damage: an object that does not decode (or whose key
	// is not one of the layout's), a name bound to a file whose objects
	// have no head.
	Problems []Finding
	// Notes are not damage, but say what a reader or the cleaner will
	// meet: an orphan record whose name still binds its file (its unlink's
	// tombstone did not land: the cleaner deletes it after its grace), a
	// lock whose change was decided (or left undecided) longer than
	// TxGrace ago (the next reader of the name resolves it).
	Notes []Finding
}

// FileState is what the volume holds of a file's objects: whether its head
// is stored, and how many objects it has.
type FileState func(ctx context.Context, fileID string) (head bool, objects int, err error)

// Check reads every object under root's ns2/ (one LIST per 1,000, a GET
// of each, up to 32 at once) and checks it decodes as the object its key
// says; each name of a node of several names to have its inode object; each
// file (a name bound to a file of one name, an inode object in force of a
// file of several) is checked to have a head, or no objects
// at all (a file created whose head never landed reads as empty); each
// orphan record to have its tombstone; each lock's decision to be younger
// than TxGrace. now is read against the store's LastModified. It never
// writes: a lock is reported, not resolved.
func Check(ctx context.Context, st staging.Store, root string, now time.Time, file FileState) (*CheckReport, error) {
	r := &CheckReport{}
	prefix := rootPrefix(root) + dirPrefix
	var mu sync.Mutex
	problem := func(key string, err error) {
		mu.Lock()
		r.Problems = append(r.Problems, Finding{key, err})
		mu.Unlock()
	}
	note := func(key string, err error) {
		mu.Lock()
		r.Notes = append(r.Notes, Finding{key, err})
		mu.Unlock()
	}
	idx := NewIndex(st, root)
	after := ""
	for {
		page, err := st.List(ctx, prefix, after, staging.MaxListKeys)
		if err != nil {
			return r, fmt.Errorf("check: list %s: %w", prefix, err)
		}
		errs := make([]error, len(page.Objects))
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		for i, o := range page.Objects {
			r.Objects++
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				errs[i] = checkObject(ctx, st, root, idx, o, now, file, r, &mu, problem, note)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return r, fmt.Errorf("check: %w", err)
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return r, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// checkObject checks one object under ns2/; an error is the store's.
func checkObject(ctx context.Context, st staging.Store, root string, idx *Index, o staging.ObjectInfo, now time.Time,
	file FileState, r *CheckReport, mu *sync.Mutex, problem, note func(string, error)) error {
	rest := strings.TrimPrefix(o.Key, rootPrefix(root)+dirPrefix)
	dir, _, _ := strings.Cut(rest, "/")
	var err error
	switch dir {
	case "d":
		return checkDentry(ctx, st, root, o, now, file, r, mu, problem, note)
	case "orphan":
		return checkRecord(ctx, idx, o, now, r, mu, problem, note)
	case "i":
		return checkInode(ctx, st, o, file, r, mu, problem)
	case "tx":
		_, _, err = read(ctx, st, o.Key, kindDecision, DecodeDecision)
	case "ino":
		_, _, err = read(ctx, st, o.Key, kindBatch, DecodeBatch)
	case "lease":
		_, _, err = read(ctx, st, o.Key, kindLease, DecodeLease)
	case "seal":
		_, _, err = read(ctx, st, o.Key, kindSeal, DecodeSeal)
	case "digest":
		_, _, err = read(ctx, st, o.Key, kindDigest, DecodeDigest)
	case "root":
		_, _, err = read(ctx, st, o.Key, kindRoot, DecodeRoot)
	default:
		problem(o.Key, errors.New("not an object of namespace v2's layout"))
		return nil
	}
	return damage(err, o.Key, problem)
}

// damage reports a damaged object; a missing one (gone since the listing)
// is nothing; any other error is returned.
func damage(err error, key string, problem func(string, error)) error {
	switch {
	case err == nil, errors.Is(err, staging.ErrNotFound):
		return nil
	case errors.Is(err, namespace.ErrCorrupt), errors.Is(err, ErrBadKey):
		problem(key, err)
		return nil
	}
	return err
}

func checkDentry(ctx context.Context, st staging.Store, root string, o staging.ObjectInfo, now time.Time,
	file FileState, r *CheckReport, mu *sync.Mutex, problem, note func(string, error)) error {
	if _, _, err := ParseDentryKey(o.Key); err != nil {
		problem(o.Key, err)
		return nil
	}
	d, info, err := read(ctx, st, o.Key, kindDentry, DecodeDentry)
	if err != nil || d == nil {
		return damage(err, o.Key, problem)
	}
	if d.Lock != nil {
		mu.Lock()
		r.Locked++
		mu.Unlock()
		xkey, _ := DecisionKey(root, d.Change)
		xinfo, err := st.Head(ctx, xkey)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			if now.Sub(info.LastModified) > TxGrace {
				note(o.Key, fmt.Errorf("locked by change %s, undecided for longer than TxGrace: its next reader aborts it", d.Change))
			}
		case err != nil:
			return err
		case now.Sub(xinfo.LastModified) > TxGrace:
			note(o.Key, fmt.Errorf("locked by change %s, decided longer than TxGrace ago and not resolved: its next reader resolves it", d.Change))
		}
	}
	b := d.Bound
	mu.Lock()
	switch {
	case d.Tombstone():
		r.Tombstones++
	case b == nil:
	case b.Node == nil:
		r.Linked++
	case b.Kind == namespace.KindFile:
		r.Files++
	case b.Kind == namespace.KindDir:
		r.Dirs++
	default:
		r.Others++
	}
	mu.Unlock()
	if b != nil && b.Node == nil {
		// A name of a node of several names: its node is its inode
		// object, which must be there (its decoding is checked where the
		// listing meets it).
		ikey, err := InodeKey(root, b.Ino)
		if err != nil {
			problem(o.Key, err)
			return nil
		}
		_, err = st.Head(ctx, ikey)
		switch {
		case errors.Is(err, staging.ErrNotFound):
			problem(o.Key, fmt.Errorf("binds node %d of several names, which has no inode object", b.Ino))
		case err != nil:
			return err
		}
		return nil
	}
	if b == nil || b.Kind != namespace.KindFile || file == nil {
		return nil
	}
	return checkHead(ctx, o.Key, b.Node.FileID, file, problem)
}

// checkHead reports file fileID, named at key, when its objects have no
// head.
func checkHead(ctx context.Context, key, fileID string, file FileState, problem func(string, error)) error {
	head, n, err := file(ctx, fileID)
	if err != nil {
		return err
	}
	if !head && n > 0 {
		problem(key, fmt.Errorf("names file %s, whose %d objects have no head", fileID, n))
	}
	return nil
}

// checkInode checks an inode object decodes; one in force of a file counts
// the file (once, however many names it has) and has its head checked. One
// out of force (Nlink 0: its last name went) waits for the cleaner.
func checkInode(ctx context.Context, st staging.Store, o staging.ObjectInfo, file FileState, r *CheckReport, mu *sync.Mutex, problem func(string, error)) error {
	in, _, err := read(ctx, st, o.Key, kindInode, DecodeInode)
	if err != nil || in == nil {
		return damage(err, o.Key, problem)
	}
	if in.Kind != namespace.KindFile || in.Nlink == 0 && (in.Lock == nil || in.Lock.Nlink == 0) {
		return nil
	}
	mu.Lock()
	r.Files++
	mu.Unlock()
	if file == nil {
		return nil
	}
	return checkHead(ctx, o.Key, in.Node.FileID, file, problem)
}

func checkRecord(ctx context.Context, idx *Index, o staging.ObjectInfo, now time.Time, r *CheckReport, mu *sync.Mutex, problem, note func(string, error)) error {
	mu.Lock()
	r.Records++
	mu.Unlock()
	_, id, err := ParseOrphanKey(o.Key)
	if err != nil {
		problem(o.Key, err)
		return nil
	}
	// A grace of 0: a record whose name binds its file reads as stale,
	// which is what is reported (without a tombstone), whatever its age.
	rec, ok, err := idx.Record(ctx, id, 0, now)
	switch {
	case err != nil:
		return err
	case !ok:
		return nil
	case rec.State == RecordDamaged:
		problem(o.Key, rec.Err)
	case rec.State == RecordStale:
		note(o.Key, fmt.Errorf("orphan record of file %s without its tombstone: its name, or another, still binds the file (an unlink that did not land; the cleaner deletes the record after its grace)", id))
	}
	return nil
}
