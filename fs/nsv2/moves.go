package nsv2

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// The moves log (section 3, "Directory moves across directories: one small
// log"). A directory moved into another directory can make a loop when two
// such moves run at once on two mounts (mv a b/ against mv b a/): each
// checks that its target is not inside what it moves, and each check passes
// before the other move lands. Linux serialises such renames of one
// filesystem under one mutex (s_vfs_rename_mutex); v2 serialises them
// through a log of entries ns2/moves/<seq>, each written If-None-Match by
// the change that moves (MoveEntry), and only the order matters:
//
//  1. Append: LIST the log, PUT the entry at the highest seq listed plus
//     one, If-None-Match (refused: list again).
//  2. Stand: LIST the log again. An entry above its own means the entry
//     came late (its LIST missed an entry that was deleted and whose
//     number came back, or raced one): it deletes its entry and appends
//     again. Otherwise its place stands: every entry appended after this
//     LIST is above it, and its mover, at its own step 2, sees this entry
//     below it and waits for it.
//  3. Wait: each entry below its own is read with its change's decision;
//     it waits (lockWaitFirst doubling to lockWaitMax, until the call's
//     deadline: then ErrLocked) until each is decided, or gone. A change
//     with no decision whose entry is older than TxGrace by the store's
//     clock is decided abort, as a reader does a lock (Resolve).
//  4. Check: walk up from each target directory to the root, reading each
//     directory's dentry from the store: reaching the moved directory is a
//     loop, refused with namespace.ErrInvalid (EINVAL, as rename(2) answers
//     a directory moved into its own subtree). The walk is sound now: the
//     parent of a directory changes only by such a move (a rename within a
//     directory changes a name, rmdir removes a leaf), every move before
//     this one is decided, and every move after it waits for this one's
//     decision before it changes anything.
//  5. The change: lock, decide (treemulti.go). The entry is deleted after
//     the decision (in the tidy of a commit, at once otherwise); an entry
//     left (its mover died) is deleted by the next mover that finds it
//     decided (step 3).
//
// An entry is deleted only once its change is decided, or by its own mover
// before its change has locked anything (step 2, or a failure before the
// locks), after which it appends anew: a waiter that sees an entry gone
// owes it nothing.
//
// What bounds the log: the moves in flight, plus the entries of movers
// that died after deciding and before deleting, which the next move
// deletes. Its seqs start again from 1 when it empties. What is left: a
// mover that dies between its append and its decision holds up the next
// move for TxGrace (30 s), as its locks would hold up its names; the walk
// of step 4 reads one dentry per level (a directory 10 levels deep: 10
// GETs, one after another), and answers ErrMovedAncestor (EBUSY) when a
// directory above the target was renamed since this mount last looked it
// up (the kernel looks the path up again on the next try). A move across
// directories in a training job is rare: files renamed across directories
// and directories renamed within their directory never use the log.

// ErrMovedAncestor: a directory above a move's target is no longer where
// this mount saw it (renamed or moved by another mount since), so the
// move's loop check cannot walk up from the target. Nothing changed; the
// mount answers EBUSY, and a lookup of the path again finds it.
var ErrMovedAncestor = errors.New("a directory above the target was renamed or moved since it was looked up")

// seqDigits is the width of a moves log entry's seq in its key.
const seqDigits = 16

// maxDepth bounds the walk of step 4 (a directory deeper than this is
// refused rather than walked: no name of a POSIX path could reach it).
const maxDepth = 4096

// MovedDir is one directory a change moves: node Ino, from directory From
// into directory To.
type MovedDir struct {
	Ino  namespace.Ino `json:"i"`
	From namespace.Ino `json:"f"`
	To   namespace.Ino `json:"t"`
}

// MoveEntry is the entry of the moves log at MoveKey(Seq): change Tx moves
// the directories of Dirs (one, or two for an exchange) across directories.
// Its envelope's kind is 9.
//
//	{"s":<seq>,"c":"<change id>","d":[{"i":<ino>,"f":<from dir>,"t":<to dir>}, ...]}
//
// One or two directories, each ino, from and to nonzero, from != to, and
// the ino neither the root nor to.
type MoveEntry struct {
	Seq  uint64     `json:"s"`
	Tx   string     `json:"c"`
	Dirs []MovedDir `json:"d"`
}

func (m *MoveEntry) check() error {
	if m.Seq == 0 {
		return fmt.Errorf("seq 0")
	}
	if !ValidID(m.Tx) {
		return fmt.Errorf("change id %q", m.Tx)
	}
	if len(m.Dirs) < 1 || len(m.Dirs) > 2 {
		return fmt.Errorf("%d directories, want 1 or 2", len(m.Dirs))
	}
	for i, d := range m.Dirs {
		if d.Ino == 0 || d.From == 0 || d.To == 0 || d.From == d.To || d.Ino == d.To || d.Ino == namespace.RootIno {
			return fmt.Errorf("directory %d: %d from %d to %d", i, d.Ino, d.From, d.To)
		}
	}
	return nil
}

// Key is the key m belongs at.
func (m *MoveEntry) Key(root string) (string, error) { return MoveKey(root, m.Seq) }

// EncodeMove is the object of m.
func EncodeMove(m *MoveEntry) ([]byte, error) { return encode(kindMove, m, m.check) }

// DecodeMove decodes and checks the moves log entry read from key.
func DecodeMove(key string, data []byte) (*MoveEntry, error) {
	return decodeAt[MoveEntry](key, kindMove, data, func(k string) (string, error) {
		root, _, err := ParseMoveKey(k)
		return root, err
	})
}

// MoveKey is the key of the moves log's entry seq (nonzero):
// <root>/ns2/moves/<seq>, seq 16 lower-case hex digits.
func MoveKey(root string, seq uint64) (string, error) {
	if seq == 0 {
		return "", fmt.Errorf("moves log key: seq 0")
	}
	return finish(movesPrefix(root) + hexN(seq, seqDigits))
}

// movesPrefix is the prefix of the moves log's keys.
func movesPrefix(root string) string { return rootPrefix(root) + dirPrefix + "moves/" }

// ParseMoveKey parses a moves log entry's key.
func ParseMoveKey(key string) (root string, seq uint64, err error) {
	root, s, err := split(key, "moves", 1)
	if err != nil {
		return "", 0, err
	}
	v, ok := parseHexN(s[0], seqDigits)
	if !ok || v == 0 {
		return "", 0, badKey(key, "seq %q is not %d hex digits of a nonzero number", s[0], seqDigits)
	}
	return root, v, nil
}

// listMoves is the seqs of the log's entries, ascending.
func (t *Tree) listMoves(ctx context.Context) ([]uint64, error) {
	objs, err := staging.ListAll(ctx, t.st, movesPrefix(t.root))
	if err != nil {
		return nil, fmt.Errorf("list the moves log: %w", err)
	}
	var out []uint64
	for _, o := range objs {
		r, seq, err := ParseMoveKey(o.Key)
		if err != nil || r != strings.Trim(t.root, "/") {
			t.log.Warn("namespace v2: a key in the moves log is not an entry", zap.String("key", o.Key), zap.Error(err))
			continue
		}
		out = append(out, seq)
	}
	return out, nil
}

// moveEnter serialises change tx, which moves dirs across directories,
// through the moves log (steps 1 to 4 above) and returns its entry's seq.
// On an error it has left no entry of tx (or, when the deletion failed,
// one that the next mover deletes once tx is decided: the caller decides
// abort). What the caller is told: nil, the move may go on; an error
// matching namespace.ErrInvalid, a loop; ErrLocked, a move before it is
// not decided yet (wait and try again); ErrMovedAncestor; or the store's.
func (t *Tree) moveEnter(ctx context.Context, tx string, dirs []MovedDir) (uint64, error) {
	for range maxRounds {
		seqs, err := t.listMoves(ctx)
		if err != nil {
			return 0, err
		}
		seq := uint64(1)
		if len(seqs) > 0 {
			seq = seqs[len(seqs)-1] + 1
		}
		m := &MoveEntry{Seq: seq, Tx: tx, Dirs: dirs}
		key, err := m.Key(t.root)
		if err != nil {
			return 0, err
		}
		body, err := EncodeMove(m)
		if err != nil {
			return 0, err
		}
		r, err := put(ctx, t.st, key, body, staging.Conditions{IfNoneMatch: true}, kindMove, DecodeMove,
			func(cur *MoveEntry) bool { return cur.Tx == tx })
		switch {
		case err != nil:
			// Perhaps appended: the caller decides tx abort, and the
			// entry, if there, is then deleted by the next mover.
			return 0, fmt.Errorf("append to the moves log: %w", err)
		case r.refused:
			continue // taken: list again
		}
		seqs, err = t.listMoves(ctx)
		if err != nil {
			return seq, t.moveLeave(ctx, seq, err)
		}
		if len(seqs) > 0 && seqs[len(seqs)-1] > seq {
			// Late: another entry above it was appended first.
			if err := t.deleteMove(ctx, seq); err != nil {
				return seq, err
			}
			continue
		}
		if err := t.waitMoves(ctx, seq, seqs); err != nil {
			return seq, t.moveLeave(ctx, seq, err)
		}
		for _, d := range dirs {
			if err := t.checkNoLoop(ctx, d); err != nil {
				return seq, t.moveLeave(ctx, seq, err)
			}
		}
		return seq, nil
	}
	return 0, fmt.Errorf("append to the moves log: %w", ErrContended)
}

// moveLeave deletes entry seq of a move that locked nothing, and returns
// cause. It runs when the call's ctx may have ended (cause), so under a
// context of its own.
func (t *Tree) moveLeave(ctx context.Context, seq uint64, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tidyTimeout)
	defer cancel()
	if err := t.deleteMove(ctx, seq); err != nil {
		return fmt.Errorf("%w (and %v)", cause, err)
	}
	return cause
}

// deleteMove deletes entry seq.
func (t *Tree) deleteMove(ctx context.Context, seq uint64) error {
	key, err := MoveKey(t.root, seq)
	if err != nil {
		return err
	}
	if err := t.st.Delete(ctx, key); err != nil && !errors.Is(err, staging.ErrNotFound) {
		return fmt.Errorf("delete moves log entry %d: %w", seq, err)
	}
	return nil
}

// waitMoves waits until every entry below seq is decided or gone (step 3),
// deleting the decided ones, until ctx ends (then ErrLocked). seqs is the
// log as listed last.
func (t *Tree) waitMoves(ctx context.Context, seq uint64, seqs []uint64) error {
	wait := lockWaitFirst
	for {
		pending := 0
		for _, s := range seqs {
			if s >= seq {
				break
			}
			done, err := t.moveDecided(ctx, s)
			if err != nil {
				return err
			}
			if !done {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		if t.sleep(ctx, wait) != nil {
			return fmt.Errorf("%d moves before this one not decided: %w", pending, ErrLocked)
		}
		wait = min(2*wait, lockWaitMax)
		var err error
		if seqs, err = t.listMoves(ctx); err != nil {
			return err
		}
	}
}

// moveDecided says whether entry s's change is decided (and deletes the
// entry then) or gone; a change with no decision whose entry is older than
// TxGrace by the store's clock is decided abort first.
func (t *Tree) moveDecided(ctx context.Context, s uint64) (bool, error) {
	key, err := MoveKey(t.root, s)
	if err != nil {
		return false, err
	}
	m, info, err := read(ctx, t.st, key, kindMove, DecodeMove)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("moves log: %w", err)
	}
	xkey, err := DecisionKey(t.root, m.Tx)
	if err != nil {
		return false, err
	}
	_, _, err = read(ctx, t.st, xkey, kindDecision, DecodeDecision)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		if t.p.now().Sub(info.LastModified) <= t.p.txGrace {
			return false, nil
		}
		if _, err := t.p.decide(ctx, &Decision{Tx: m.Tx, Outcome: Abort}); err != nil {
			return false, fmt.Errorf("moves log entry %d: %w", s, err)
		}
	case err != nil:
		return false, fmt.Errorf("moves log entry %d: %w", s, err)
	}
	if err := t.deleteMove(ctx, s); err != nil {
		t.log.Debug("namespace v2: a decided moves log entry left", zap.Uint64("seq", s), zap.Error(err))
	}
	return true, nil
}

// checkNoLoop walks up from d.To to the root (step 4): meeting d.Ino is a
// loop. Each level's dentry is read from the store, at the place this
// mount saw the directory; a directory no longer there is followed to
// where the change that took it went (movedTo), and one that cannot be is
// ErrMovedAncestor; one locked by a change not decided is ErrLocked.
func (t *Tree) checkNoLoop(ctx context.Context, d MovedDir) error {
	cur := d.To
	var at *place // where cur is, when found by following a move
	hops := 0
	for range maxDepth {
		switch cur {
		case d.Ino:
			return fmt.Errorf("move directory %d into %d, inside it: %w", d.Ino, d.To, namespace.ErrInvalid)
		case namespace.RootIno:
			return nil
		}
		e := at
		if e == nil {
			t.mu.Lock()
			c := t.inos[cur]
			if c != nil && c.bound != nil && c.bound.Kind == namespace.KindDir {
				e = &place{dir: c.dir, frags: c.frags, name: c.name}
			}
			t.mu.Unlock()
		}
		if e == nil {
			return fmt.Errorf("directory %d above the target: not seen by this mount: %w", cur, ErrMovedAncestor)
		}
		r, err := t.p.Resolve(ctx, e.dir, e.frags, e.name)
		if err != nil {
			return fmt.Errorf("directory %d above the target: %w", cur, err)
		}
		if r.Pending {
			return &NameError{Key: r.Key, Err: ErrLocked, Dentry: r.Dentry, ETag: r.ETag}
		}
		if r.Bound == nil || r.Bound.Ino != cur {
			// Moved or renamed since this mount saw it: the change that
			// took it from there says where it went (its op list, on the
			// name it left, until the cleaner drops it).
			dir, ok := movedTo(r, cur)
			if !ok || hops >= maxDepth {
				return fmt.Errorf("directory %d above the target, %q in %d: %w", cur, e.name, e.dir, ErrMovedAncestor)
			}
			hops++
			at = &place{dir: dir.Dir, frags: dir.Frags, name: string(dir.Name)}
			continue
		}
		at = nil
		cur = e.dir
	}
	return fmt.Errorf("directory %d: more than %d levels deep: %w", d.To, maxDepth, namespace.ErrInvalid)
}

// leaveMove deletes entry seq of a decided move; one left is deleted by
// the next move.
func (t *Tree) leaveMove(ctx context.Context, seq uint64) {
	if err := t.deleteMove(ctx, seq); err != nil {
		t.log.Debug("namespace v2: a decided moves log entry left for the next move", zap.Error(err))
	}
}

// abandonMove ends change tx, a move that failed, in the log: it decides
// tx abort (or finds the commit that stands, after an answer lost), so
// that no later move waits for it, then deletes entry seq (0: none
// appended, or not known where). When the decision cannot be written the
// entry stays: the next move decides tx abort once TxGrace has passed.
func (t *Tree) abandonMove(ctx context.Context, tx string, seq uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tidyTimeout)
	defer cancel()
	if _, err := t.p.decide(ctx, &Decision{Tx: tx, Outcome: Abort}); err != nil {
		t.log.Debug("namespace v2: a failed move left for the next move to abort", zap.String("change", tx), zap.Error(err))
		return
	}
	if seq != 0 {
		t.leaveMove(ctx, seq)
	}
}

// place is where a name is: its directory, that directory's fragment
// count, and the name.
type place struct {
	dir   namespace.Ino
	frags uint32
	name  string
}

// movedTo is the op of the change that left r (a name read where node ino
// was) that binds ino elsewhere: a rename of it, by the op list of the
// decision, or of the dentry the change resolved to.
func movedTo(r Resolved, ino namespace.Ino) (Op, bool) {
	var ops []Op
	switch {
	case r.Decision != nil:
		ops = r.Decision.Ops
	case r.Dentry != nil:
		ops = r.Dentry.Ops
	}
	for _, o := range ops {
		if o.Ino == 0 && o.To != nil && o.To.Ino == ino {
			return o, true
		}
	}
	return Op{}, false
}
