package nsv2

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// A directory's fragment count (section 3): user.ckptfs.fragments.
//
// setfattr -n user.ckptfs.fragments -v F DIR sets the fragment count of an
// empty directory DIR to F, a power of two from 1 to MaxFrags (256); the
// directories made in it after inherit it. getfattr -n of it answers the
// count (of the root too, which is the mount's, Config.RootFrags, and
// cannot be set). It is not listed (listxattr), so that copying a
// directory's attributes does not try to set it.
//
// Its change is rmdir's (treemulti.go, lease.go), the directory kept: a
// change of the directory's one name (lock; seal of the directory, which
// says the count it sets; its create leases waited out; its emptiness
// checked; decide), whose op binds the directory to a copy of its
// binding with the new count. A directory with names is refused,
// ErrNotEmpty (ENOTEMPTY, as rmdir: the names are the cause, and the
// change may be made once they go; EBUSY would say "try again" to a
// caller whose next try fails the same way). A name another mount adds
// meanwhile either lands before the emptiness check (its lease was waited
// out, so the change is refused), or is added after the mount read the
// seal: it waits for the change's decision (the seal says a count is
// being set, ErrLocked), then reads the count the seal says.
//
// Every mount adding a name to a directory holds a lease on it, whose
// every renewal reads the seal (lease.go): a seal decided commit says the
// count it set, one decided abort the count before (was), and every seal
// written over a seal that says a count says one. A mount that adds a name
// with another count than the seal's sets the seal's in its cache and
// tries again (fragsAgree). A directory whose count never changed has no
// seal that says one, and its count is the one it was made with, which
// every binding of it holds. So no name lands in a fragment the directory
// does not have. What another mount serves from its cache meanwhile (a
// listing of the directory, a lookup of a name in it) is of the count it
// holds, read again within ns_refresh as any name.

// MaxFragsValue bounds the bytes of a value of FragmentsXattr.
const maxFragsValue = 3

// parseFrags parses a value of FragmentsXattr: decimal digits of a power
// of two from 1 to MaxFrags, nothing else.
func parseFrags(value []byte) (uint32, error) {
	bad := func() error {
		return fmt.Errorf("%s value %q: want a power of two from 1 to %d: %w", FragmentsXattr, value, MaxFrags, namespace.ErrInvalid)
	}
	if len(value) == 0 || len(value) > maxFragsValue || value[0] == '0' {
		return 0, bad()
	}
	for _, c := range value {
		if c < '0' || c > '9' {
			return 0, bad()
		}
	}
	f, err := strconv.ParseUint(string(value), 10, 32)
	if err != nil || !ValidFrags(uint32(f)) {
		return 0, bad()
	}
	return uint32(f), nil
}

// fragsSet is the fragment count that ops set on directory dir: the count
// of an op binding dir (a change of its count), 0 for none (a removal).
func fragsSet(ops []Op, dir namespace.Ino) uint32 {
	for _, o := range ops {
		if o.To != nil && o.To.Ino == dir && o.To.Kind == namespace.KindDir {
			return o.To.Frags
		}
	}
	return 0
}

// fragsAgree checks the fragment count frags a caller adds a name to dir
// with against known, the count dir's seal said at the last renewal of
// this mount's lease (0: it said none). Another count is set in the cache
// and answered with an error matching ErrLocked: the caller reads the
// count again and tries again (waitLocked).
func (t *Tree) fragsAgree(dir namespace.Ino, known, frags uint32) error {
	if known == 0 || known == frags {
		return nil
	}
	t.fixFrags(dir, known)
	return fmt.Errorf("directory %d has %d fragments, not %d: %w", dir, known, frags, ErrLocked)
}

// fixFrags sets directory dir's fragment count in the cache to frags: a
// copy of its entry, stale, with no ETag to write on (its next use reads
// it, and a change of it reads it first).
func (t *Tree) fixFrags(dir namespace.Ino, frags uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.inos[dir]
	if e == nil || e.bound == nil || e.bound.Ino != dir || e.bound.Frags == frags {
		return
	}
	c := copyEntry(e)
	b := *e.bound
	b.Frags = frags
	c.bound, c.etag, c.gen = &b, "", t.gen-1
	if t.names[nameKey{e.dir, e.name}] == e {
		t.names[nameKey{e.dir, e.name}] = c
	}
	t.inos[dir] = c
}

// fragsOf is the value of FragmentsXattr of node ino: its fragment count
// in decimal, a directory's only (ErrNoAttr for another node).
func (t *Tree) fragsOf(ctx context.Context, ino namespace.Ino) ([]byte, error) {
	if ino == namespace.RootIno {
		return []byte(strconv.FormatUint(uint64(t.rootFrags), 10)), nil
	}
	e, err := t.current(ctx, ino)
	if err != nil {
		return nil, err
	}
	if e == nil {
		// An orphan or a node of several names (not a directory), or a
		// node this mount has not seen (ErrNotExist), as attrsOf says.
		if _, err := t.attrsOf(ctx, ino); err != nil {
			return nil, err
		}
	}
	if e == nil || e.bound == nil || e.bound.Kind != namespace.KindDir {
		return nil, fmt.Errorf("attribute %q of node %d, not a directory: %w", FragmentsXattr, ino, namespace.ErrNoAttr)
	}
	return []byte(strconv.FormatUint(uint64(e.bound.Frags), 10)), nil
}

// setFrags sets the fragment count of directory ino to value (see above),
// waiting while a name it needs is locked by another change.
func (t *Tree) setFrags(ctx context.Context, ino namespace.Ino, value []byte) error {
	f, err := parseFrags(value)
	if err != nil {
		return err
	}
	if ino == namespace.RootIno {
		return fmt.Errorf("the root's fragment count is the mount's (%d): %w", t.rootFrags, namespace.ErrNotSupported)
	}
	_, err = waitLocked(ctx, t, func() (struct{}, error) { return struct{}{}, t.setFragsTry(ctx, ino, f) })
	return err
}

func (t *Tree) setFragsTry(ctx context.Context, ino namespace.Ino, f uint32) error {
	for range maxRounds {
		e, err := t.current(ctx, ino)
		switch {
		case err != nil:
			return err
		case e == nil:
			return fmt.Errorf("node %d: %w", ino, namespace.ErrNotExist)
		case e.bound.Kind != namespace.KindDir:
			return fmt.Errorf("%s of node %d: not a directory: %w", FragmentsXattr, ino, namespace.ErrInvalid)
		}
		// Its name read now, for the ETag the lock is conditioned on.
		if e, err = t.readName(ctx, e.dir, e.frags, e.name); err != nil {
			return err
		}
		if e == nil || e.bound == nil || e.bound.Ino != ino {
			continue // moved or gone since cached: current reads it again
		}
		if e.bound.Frags == f {
			return nil
		}
		b := *e.bound
		b.Frags = f
		ops := []Op{{Dir: e.dir, Frags: e.frags, Name: Name(e.name), To: &b}}
		// The next name added here takes a lease again, and reads the
		// count from the seal.
		if retry, err := t.sealingChange(ctx, ops, e, ino, e.bound.Frags); retry {
			continue
		} else if err != nil {
			return err
		}
		return nil
	}
	return ErrContended
}
