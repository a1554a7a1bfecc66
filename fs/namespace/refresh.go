package namespace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ckptfs/ckptfs/staging"
)

// trustedLocked reports whether the tail confirmation is young enough, at
// clock reading now, to append or refresh without listing. mu or appendMu
// held.
func (ns *Namespace) trustedLocked(now time.Time) bool {
	return !ns.tailAt.IsZero() && now.Sub(ns.tailAt) < ns.opts.TailTrust
}

// confirmLocked records that st.seq was the last entry of the log as of
// clock reading at. appendMu held.
func (ns *Namespace) confirmLocked(at time.Time) {
	ns.mu.Lock()
	if at.After(ns.tailAt) {
		ns.tailAt = at
	}
	ns.mu.Unlock()
}

// Refresh applies the log entries written since the last refresh or change.
//
// With a trusted tail (see Options.TailTrust) it reads entry seq+1: when
// nothing changed that one GET is all it costs, and it confirms the tail.
// Otherwise, or once it found an entry, it lists the log after the state
// (which also sees a gap left by trimming and loads the snapshot then).
// Seq tells whether anything changed.
//
// It holds no lock across its store calls: it reads the entries after the
// state it saw, then applies them under appendMu if no change moved the
// state meanwhile (a change reads what it missed itself). A refresh stuck on
// the store thus delays no change of this mount, and no read.
func (ns *Namespace) Refresh(ctx context.Context) error {
	if err := ns.fenced(); err != nil {
		return err // the log ends in a fence: nothing more to see
	}
	ns.mu.RLock()
	applied := ns.st.seq
	trusted := ns.trustedLocked(ns.opts.Clock())
	ns.mu.RUnlock()
	if !trusted {
		return ns.refreshList(ctx)
	}
	sent := ns.opts.Clock()
	e, err := ns.readEntry(ctx, applied+1)
	if errors.Is(err, staging.ErrNotFound) {
		// Not there while the confirmation before was still trusted: an
		// entry written since that confirmation cannot have been trimmed yet
		// (see the package doc), so seq+1 is free, as of sent.
		ns.appendMu.Lock()
		if ns.st.seq == applied && ns.trustedLocked(sent) {
			ns.confirmLocked(sent)
		}
		ns.appendMu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	ns.appendMu.Lock()
	moved := ns.st.seq != applied
	if !moved {
		err = ns.applyEntry(e)
	}
	ns.appendMu.Unlock()
	if err != nil || moved {
		return err
	}
	// Another mount is writing: list the rest at once rather than GET one
	// entry per round trip; the listing also confirms the tail.
	return ns.refreshList(ctx)
}

// refreshList is Refresh the listing way, which sees gaps and confirms the
// tail whatever the age of the last confirmation.
func (ns *Namespace) refreshList(ctx context.Context) error {
	for {
		ns.mu.RLock()
		applied := ns.st.seq
		ns.mu.RUnlock()
		sent := ns.opts.Clock()
		page, seqs, err := ns.listAfter(ctx, applied)
		if err != nil {
			return err
		}
		if len(page.Objects) > 0 && len(seqs) == 0 {
			// A gap: entries a snapshot covers were trimmed; the locked
			// path loads the snapshot.
			ns.appendMu.Lock()
			err := ns.refreshLocked(ctx)
			ns.appendMu.Unlock()
			return err
		}
		entries, err := ns.readEntries(ctx, seqs)
		if err != nil {
			return err
		}
		last := !page.Truncated && len(seqs) == len(page.Objects)
		ns.appendMu.Lock()
		moved := ns.st.seq != applied
		if !moved {
			for _, e := range entries {
				if err := ns.applyEntry(e); err != nil {
					ns.appendMu.Unlock()
					return err
				}
			}
			if last {
				ns.confirmLocked(sent)
			}
		}
		ns.appendMu.Unlock()
		if moved || last {
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

// refreshLocked reads and applies every entry after st.seq, and confirms the
// tail. Entries are contiguous; a gap is only legitimate when entries that a
// snapshot covers were trimmed, and then the snapshot replaces the state.
func (ns *Namespace) refreshLocked(ctx context.Context) error {
	for {
		applied := ns.st.seq
		sent := ns.opts.Clock()
		page, seqs, err := ns.listAfter(ctx, applied)
		if err != nil {
			return err
		}
		if len(page.Objects) == 0 {
			ns.confirmLocked(sent)
			return nil
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
			ns.confirmLocked(sent)
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

// skipGap handles a listing that resumes at seq past st.seq+1. appendMu
// held. A listing is no proof that entries are missing: one taken while
// entries are created may show a later entry without an earlier one (the
// dir store's folder read, an S3 listing under way). So entry st.seq+1 is
// read by name first: there, it is applied and the caller lists again.
// Missing, it was trimmed, and a snapshot covers it: the newest replaces
// the state if it is newer. With none newer, the log is listed and the
// entry read by name once more before the gap is believed: the log is
// corrupt (entries missing, no snapshot covering them).
func (ns *Namespace) skipGap(ctx context.Context, seq uint64) error {
	for try := 0; ; try++ {
		next := ns.st.seq + 1
		e, err := ns.readEntry(ctx, next)
		if err == nil {
			return ns.applyEntry(e)
		}
		if !errors.Is(err, staging.ErrNotFound) {
			return err
		}
		st, err := ns.loadSnapshot(ctx, ns.st.seq)
		if err != nil {
			return err
		}
		if st != nil {
			ns.mu.Lock()
			ns.st = st
			ns.mu.Unlock()
			ns.sinceSnap = 0
			return nil
		}
		if try > 0 {
			return corruptf(LogKey(ns.root, next), "log entries %d..%d missing and no snapshot covers them", next, seq-1)
		}
		page, seqs, err := ns.listAfter(ctx, ns.st.seq)
		if err != nil {
			return err
		}
		if len(seqs) > 0 || len(page.Objects) == 0 {
			return nil // no gap any more: the caller lists again
		}
		seq, _ = parseSeq(page.Objects[0].Key, ns.logPrefix())
	}
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
// corruption: its writer checked it against this very state. appendMu held.
func (ns *Namespace) applyEntry(e *entry) error {
	if e.Fence != nil {
		return ns.meetFence(e) // never applied: the log ends here
	}
	if e.Op != nil {
		// One op is checked outside mu, so that reads wait only for the
		// change itself.
		if err := ns.st.apply(e, true); err != nil {
			return corruptf(LogKey(ns.root, e.Seq), "does not apply: %v", err)
		}
	}
	ns.mu.Lock()
	err := ns.st.apply(e, false) // all or nothing
	ns.mu.Unlock()
	if err != nil {
		return corruptf(LogKey(ns.root, e.Seq), "does not apply: %v", err)
	}
	ns.sinceSnap += uint64(len(e.ops()))
	return nil
}
