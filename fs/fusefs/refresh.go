package fusefs

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// loop runs the periodic work of the mount: namespace refresh, the periodic
// flush, and the retry of flushes of closed files. It stops when Close
// cancels fsys.ctx.
//
// The refresh backs off while the mount is idle: after a refresh that found
// nothing new, when no one used the mount and it changed nothing since the
// last one, the next waits twice as long, up to ns_refresh_max; any of these
// brings it back to ns_refresh, a use at once (see touch). With the store
// down, refreshes fail and back off the same way unless the mount is used.
func (fsys *FS) loop() {
	defer fsys.wg.Done()
	base := fsys.cfg.NSRefresh
	most := fsys.cfg.RefreshMax()
	every := base
	fsys.refreshEvery.Store(int64(every))
	refresh := time.NewTimer(every)
	defer refresh.Stop()
	last := time.Now() // when the last refresh ended
	seq, used := fsys.nsSeq(), fsys.used.Load()
	var flushC <-chan time.Time
	if fsys.cfg.FlushInterval > 0 {
		t := time.NewTicker(fsys.cfg.FlushInterval)
		defer t.Stop()
		flushC = t.C
	}
	idle := time.NewTicker(idleTick)
	defer idle.Stop()
	refreshFailing := false
	for {
		select {
		case <-fsys.ctx.Done():
			return
		case <-fsys.wake:
			// Someone uses the mount while the loop waits longer than
			// ns_refresh: the next refresh is due ns_refresh after the last.
			if every > base {
				every = base
				fsys.refreshEvery.Store(int64(every))
				fsys.backedOff.Store(false)
				refresh.Reset(max(0, time.Until(last.Add(base))))
			}
		case <-refresh.C:
			if _, ok := fsys.ns.(namespace.Sequenced); !ok {
				// A namespace with no one log (v2) reads names on use
				// and lets what it cached expire by itself (ns_refresh,
				// volume.NamesOptions.Fresh): a periodic Refresh would
				// only make every lookup after it read its name again.
				break
			}
			before := fsys.nsSeq()
			began := time.Now()
			// Bounded: a refresh stuck on a dead store would hold up the
			// periodic flush and the unmount (Close waits for this loop).
			ctx, cancel := context.WithTimeout(fsys.ctx, requestBound(fsys.cfg))
			err := fsys.ns.Refresh(ctx)
			cancel()
			fsys.refreshes.Add(1)
			// Logged when refreshes start failing and when they work
			// again, not every tick of an outage.
			switch {
			case err != nil && fsys.ctx.Err() == nil && !refreshFailing:
				refreshFailing = true
				fsys.log.Warn("namespace refresh failed; other mounts' changes are not seen until it works again", zap.Error(err))
			case err == nil && refreshFailing:
				refreshFailing = false
				fsys.log.Info("namespace refresh works again")
			}
			// Something new (found now, or changed here since the last
			// refresh), or someone used the mount: stay at ns_refresh.
			after, u := fsys.nsSeq(), fsys.used.Load()
			if after != before || before != seq || u != used {
				every = base
			} else {
				every = min(2*every, most)
			}
			seq, used = after, u
			fsys.backedOff.Store(every > base)
			// A use between the load above and the store missed the wake.
			if every > base && fsys.used.Load() != used {
				every = base
				fsys.backedOff.Store(false)
			}
			fsys.refreshEvery.Store(int64(every))
			last = time.Now()
			if err == nil {
				// When it began: what was in the log then, it has read
				// (missingHead relies on it).
				fsys.refreshedAt.Store(began.UnixNano())
			}
			refresh.Reset(every)
		case <-flushC:
			fsys.flushAll(fsys.ctx)
		case <-idle.C:
			fsys.flushIdle(fsys.ctx)
			fsys.pruneOrphans(fsys.ctx)
		}
	}
}

// nsSeq is the seq of the namespace's log (namespace.Sequenced), which
// tells the loop whether a refresh found anything; 0 for a namespace with
// no one log, whose refreshes the loop then backs off on the mount's use
// alone.
func (fsys *FS) nsSeq() uint64 {
	if s, ok := fsys.ns.(namespace.Sequenced); ok {
		return s.Seq()
	}
	return 0
}

// touch records that a request of someone using the mount arrived, for the
// refresh loop's backoff: one atomic add, and a wake of the loop (never a
// wait) when it has backed off. The request goes on with the namespace as it
// is; the refresh it brings on serves the requests after it.
func (fsys *FS) touch() {
	fsys.used.Add(1)
	if fsys.backedOff.Load() {
		select {
		case fsys.wake <- struct{}{}:
		default:
		}
	}
}

// freshen reads what other mounts changed when the last read of the
// namespace is older than twice ns_refresh (the loop backed off while the
// mount was idle), and says whether it did. A lookup that misses calls it
// before it answers ENOENT, so that another mount's new name shows within
// 2 × ns_refresh to a mount that looks for it, idle or not. A mount in use
// reads the log every ns_refresh anyway, so its misses (every create looks
// its name up first) do not wait for a read. Concurrent misses share one
// read, which is bounded by the request bounds and by ctx.
func (fsys *FS) freshen(ctx context.Context) bool {
	if _, ok := fsys.ns.(namespace.Sequenced); !ok {
		return false // v2: a miss reads the name from the store itself
	}
	if time.Since(time.Unix(0, fsys.refreshedAt.Load())) < 2*fsys.cfg.NSRefresh {
		return false
	}
	// A store that has answered nothing for a while is not waited for: the
	// miss answers from what the mount knows (a create after it is still
	// arbitrated by the log). Nor is a slow one for longer than statWait,
	// so that a lookup during an outage costs seconds, not op_timeout.
	if fsys.storeSilent() {
		return false
	}
	ch := fsys.nsFlight.DoChan("refresh", func() (any, error) {
		return nil, fsys.readLog(fsys.ctx)
	})
	wait := time.NewTimer(statWait)
	defer wait.Stop()
	select {
	case r := <-ch:
		return r.Err == nil
	case <-ctx.Done():
		return false
	case <-wait.C:
		return false
	}
}

// refreshNow reads what other mounts changed, starting now, and says
// whether it did: not shared with a read in flight, which may have begun
// before the caller found what it must look at again (staledir.go).
func (fsys *FS) refreshNow(ctx context.Context) bool {
	return fsys.readLog(ctx) == nil
}

// readLog reads the namespace log to its end, bounded by the request bounds
// and by ctx, and records when it began.
func (fsys *FS) readLog(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, requestBound(fsys.cfg))
	defer cancel()
	start := time.Now()
	err := fsys.ns.Refresh(rctx)
	if err == nil {
		fsys.refreshedAt.Store(start.UnixNano())
	}
	return err
}

// flushAll publishes a checkpoint of every dirty file.
func (fsys *FS) flushAll(ctx context.Context) {
	for _, of := range fsys.snapshotFiles() {
		if of.f.Stat().Dirty && !fsys.isOrphan(of.id) {
			if _, err := fsys.flush(ctx, of); err != nil && ctx.Err() == nil {
				fsys.log.Warn("periodic flush failed; data stays dirty", zap.String("file", of.id), zap.Error(err))
			}
		}
	}
	fsys.flushIdle(ctx)
}

// flushIdle retries the flush of files no handle holds any more, and closes
// them once clean.
func (fsys *FS) flushIdle(ctx context.Context) {
	for _, of := range fsys.snapshotFiles() {
		fsys.mu.Lock()
		idle := of.refs == 0
		fsys.mu.Unlock()
		if !idle {
			continue
		}
		if of.f.Stat().Dirty && !fsys.isOrphan(of.id) && fsys.cfg.FlushInterval > 0 {
			if _, err := fsys.flush(ctx, of); err != nil {
				fsys.log.Warn("flush of a closed file failed; data stays dirty", zap.String("file", of.id), zap.Error(err))
				continue
			}
		}
		fsys.closeIfIdle(of)
	}
}
