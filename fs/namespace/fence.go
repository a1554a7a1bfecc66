package namespace

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// The fence ends a v1 log when its volume is upgraded to namespace v2
// (ckptfs upgrade, fs/upgrade; docs/namespace-v2.md §6). It is a log entry
// at the log's next seq, created with If-None-Match as every entry is, in
// envelope version 5, with no op:
//
//	{"seq":9,"id":"<32 hex>","t":<unix ns>,"fence":{"to":"v2"}}
//
// "to" is the namespace the volume moves to; "v2" is the only one. The
// fence takes the seq every writer of the log appends at next, so no change
// lands after it: a mount whose append is refused reads the entry there, as
// it reads any other writer's, and meets the fence. Builds before it refuse
// version 5 as a version they do not know (ErrCorrupt, "unknown format
// version 5"): their change fails, their refresh fails, they mount nothing.
// This build knows it: it applies every entry before the fence, then stops —
// the change fails with a *FencedError (errors.Is ErrFenced), Refresh
// returns it, and every later change and refresh too, with no request; the
// first meeting is logged. Open refuses a fenced log with it, unless
// Options.ReadFenced (the upgrade, which reads the state the fence ends).
//
// A fence is never applied: the state stays at the entry before it (Seq),
// and no snapshot is written past it.

// FenceToV2 is what a fence's "to" says: the volume moves to namespace v2.
// It is part of the format.
const FenceToV2 = "v2"

// fenceRec is the body's "fence".
type fenceRec struct {
	To string `json:"to"`
}

// ErrFenced: the log ends in a fence; namespace v1 makes no change on this
// volume any more. The error is a *FencedError.
var ErrFenced = errors.New("namespace v1 fenced by ckptfs upgrade")

// FencedError is the error of a change or refresh of a fenced log.
type FencedError struct {
	Key string // the fence's log entry
	Seq uint64 // its seq; the state ends at Seq-1
	ID  string // its id
	To  string // the namespace the volume moves to
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("the namespace log ends in a fence (%s): the volume is being upgraded to namespace %s by \"ckptfs upgrade\", "+
		"and namespace v1 makes no change on it any more; if the upgrade was interrupted, run \"ckptfs upgrade STORE\" again to finish it, "+
		"then mount the volume again", e.Key, e.To)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// encodeFence is the fence entry at seq.
func encodeFence(seq uint64, id string, t int64) []byte {
	return encodeEntry(&entry{Seq: seq, ID: id, Time: t, Fence: &fenceRec{To: FenceToV2}})
}

// decodeFence checks an entry of envelope version 5, or one with a
// "fence", decoded from key.
func decodeFence(key string, wantSeq uint64, version byte, e *entry) (*entry, error) {
	switch {
	case version != envVersionFence:
		return nil, corruptf(key, "a fence in format version %d", version)
	case e.Fence == nil:
		return nil, corruptf(key, "format version %d without a fence", version)
	case e.Op != nil || e.Ops != nil:
		return nil, corruptf(key, "a fence with ops")
	case e.Seq == 0:
		return nil, corruptf(key, "seq 0")
	case wantSeq != 0 && e.Seq != wantSeq:
		return nil, corruptf(key, "entry says seq %d", e.Seq)
	case !validID(e.ID):
		return nil, corruptf(key, "bad change id %q", e.ID)
	case e.Fence.To != FenceToV2:
		return nil, corruptf(key, "a fence to namespace %q", e.Fence.To)
	}
	return e, nil
}

// fencedLocked is the fence this mount met, or nil. mu or appendMu held.
func (ns *Namespace) fencedLocked() *FencedError { return ns.fence }

// fenced is the error of a change or refresh of a fenced log, nil when the
// mount has met no fence.
func (ns *Namespace) fenced() error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.fence == nil {
		return nil
	}
	return ns.fence
}

// Fenced returns the fence the log ends in, as this mount last read it:
// nil when it has met none.
func (ns *Namespace) Fenced() *FencedError {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.fence == nil {
		return nil
	}
	f := *ns.fence
	return &f
}

// meetFence records the fence e, read from the log after the state, and
// returns its error. The first meeting is logged: from now on this mount
// sees no change of another and makes none. appendMu held.
func (ns *Namespace) meetFence(e *entry) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.fence == nil {
		ns.fence = &FencedError{Key: LogKey(ns.root, e.Seq), Seq: e.Seq, ID: e.ID, To: e.Fence.To}
		ns.log.Error("namespace log fenced by \"ckptfs upgrade\": the volume is being upgraded to namespace "+e.Fence.To+
			"; this mount sees no more changes of other mounts and every change of its own fails (EIO). "+
			"Unmount it and mount the volume again once the upgrade is done",
			zap.String("fence", ns.fence.Key), zap.Uint64("last_seq", ns.st.seq))
	}
	return ns.fence
}

// fenceConflicts bounds the tries of a fence refused at a seq that then
// reads as empty (a conditional write of the key still in flight).
const fenceConflicts = 8

// Fence ends the log with a fence (see above) at the next seq, after
// applying every entry before it, and returns its seq: the state is then
// the newest v1 state, for good. A fence there already (an upgrade run
// before, or another at once) is the one returned. An append of another
// mount at that seq first is applied, and the fence goes after it.
//
// A send whose answer is lost is read back (the fence's id): found, it
// landed; not there, it is sent again at the same seq (never at another).
// An error that says "not known whether stored" leaves the log fenced or
// not: Fence again finds out.
func (ns *Namespace) Fence(ctx context.Context) (uint64, error) {
	ns.appendMu.Lock()
	defer ns.appendMu.Unlock()
	id, t := randomID(), ns.opts.Now().UnixNano()
	sends, conflicts := 0, 0
	for {
		if f := ns.fencedLocked(); f != nil {
			return f.Seq, nil
		}
		if err := ns.refreshLocked(ctx); err != nil {
			if f := ns.fencedLocked(); f != nil {
				return f.Seq, nil
			}
			return 0, fmt.Errorf("fence namespace log: %w", err)
		}
		seq := ns.st.seq + 1
		key := LogKey(ns.root, seq)
		_, err := ns.store.Put(ctx, key, encodeFence(seq, id, t), staging.PutOptions{
			Conditions: staging.Conditions{IfNoneMatch: true},
			Metadata:   map[string]string{writerMeta: id},
		})
		if err == nil {
			ns.meetFence(&entry{Seq: seq, ID: id, Fence: &fenceRec{To: FenceToV2}})
			return seq, nil
		}
		other, rerr := ns.readEntry(ctx, seq)
		switch {
		case rerr == nil && other.ID == id:
			// Ours: an earlier send landed, its answer lost.
			ns.meetFence(other)
			return seq, nil
		case rerr == nil:
			// Another mount's entry (or fence): applied by the refresh
			// above on the next round.
			sends, conflicts = 0, 0
		case errors.Is(rerr, staging.ErrNotFound) && errors.Is(err, staging.ErrPrecondition):
			// Refused, yet absent: a write of the key in flight.
			if conflicts++; conflicts >= fenceConflicts {
				return 0, fmt.Errorf("fence namespace log at %s: refused, yet absent after %d tries: %w", key, conflicts, err)
			}
			if berr := backoff(ctx, conflicts); berr != nil {
				return 0, fmt.Errorf("fence namespace log at %s: %w", key, berr)
			}
		case errors.Is(rerr, staging.ErrNotFound):
			if sends++; sends >= ns.opts.PutAttempts {
				return 0, fmt.Errorf("fence namespace log at %s (not stored): %w", key, err)
			}
			if berr := backoff(ctx, sends); berr != nil {
				return 0, fmt.Errorf("fence namespace log at %s: %w", key, berr)
			}
		default:
			return 0, fmt.Errorf("fence namespace log at %s: %w (not known whether stored: reading it back: %v)", key, err, rerr)
		}
	}
}

// Unfence deletes the fence this mount met or wrote, after reading it back
// (the same id): the upgrade's way back when it finds, once the log is
// fenced, a state it cannot carry over (a node of several names made in
// the meantime), before it wrote anything of namespace v2. Mounts that
// met the fence stay fenced until mounted again; the others append at its
// seq as if it had never been. The Namespace forgets the fence.
func (ns *Namespace) Unfence(ctx context.Context) error {
	ns.appendMu.Lock()
	defer ns.appendMu.Unlock()
	f := ns.fencedLocked()
	if f == nil {
		return nil
	}
	e, err := ns.readEntry(ctx, f.Seq)
	switch {
	case errors.Is(err, staging.ErrNotFound):
	case err != nil:
		return fmt.Errorf("unfence namespace log: %w", err)
	case e.Fence == nil || e.ID != f.ID:
		return fmt.Errorf("unfence namespace log: %s is no longer the fence %s: %w", f.Key, f.ID, ErrCorrupt)
	default:
		if err := ns.store.Delete(ctx, f.Key); err != nil && !errors.Is(err, staging.ErrNotFound) {
			return fmt.Errorf("unfence namespace log: delete %s: %w", f.Key, err)
		}
	}
	ns.mu.Lock()
	ns.fence = nil
	ns.mu.Unlock()
	return nil
}
