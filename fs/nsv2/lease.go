package nsv2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// Create leases and seals (section 3, "Removing a directory: a seal and
// create leases"). A mount adds a name to a directory other than the root
// (create, mkdir, symlink, mknod, a rename or a link into it) only under its
// lease on that directory, ns2/lease/<dir>/<mount>: the lease is written
// (renewed) when the mount starts adding names there and again once
// LeaseRenew has passed since the last renewal was sent, and after each
// renewal the mount reads ns2/seal/<dir>. It adds a name only when it saw no
// seal at its last renewal (a seal whose change is decided abort is none,
// and so is one of a change of the directory's fragment count decided:
// the seal then says the count, which the name is added with; frags.go),
// and that renewal was sent less than LeaseRenew ago by its own clock.
//
// A remover (rmdir, or a rename over an empty directory) locks the name,
// writes the seal, lists the leases and waits for each to be deleted (a
// holder that sees the seal deletes its lease and answers ErrNotExist) or
// to keep one ETag for LeaseTerm plus 1 % by the remover's clock; then it
// lists the directory, and commits only when it is empty. A seal of a
// committed removal stays (a lease taken later must see it); the seal of an
// aborted one stays too, and is overwritten (If-Match) by the next remover
// (its change is decided abort by then; one left by a remover that died is
// decided abort by that remover). No seal is ever deleted: see unseal.
//
// Clock assumptions, as the design states them: clocks advance at the same
// rate within 1 % over LeaseTerm (no two machines' wall clocks are
// compared), and a request adding a name lands within LeaseTerm -
// LeaseRenew (10 s) of being sent — the store's client gives up on a
// request well before (staging/s3's timeouts). A name sent under a lease
// then lands while the lease is still being waited for, so the remover's
// listing sees it.
//
// An idle lease is deleted at the mount's next renewal of another lease or
// at Close (not by a timer): until then a remover waits for it to run out,
// at most LeaseTerm plus 1 %.
//
// A lease in use (a name added under it less than LeaseIdle ago) is renewed
// by the refresher (refresh.go) once 3/4 of LeaseRenew has passed since its
// last renewal was sent, so that a create does not wait for the renewal's
// PUT and the seal's GET; only the first name added to a directory, or one
// after a pause, does. The renewal is the same: the lease written, then the
// seal read; it counts only if no other renewal of the lease was begun
// since, and a seal seen drops the lease as at a create.

// Timings of the leases (section 3).
const (
	LeaseTerm  = 20 * time.Second
	LeaseRenew = 10 * time.Second
	LeaseIdle  = 10 * time.Second
	// leasePoll is how often a remover reads a lease it waits for.
	leasePoll = time.Second
)

// leaseState is this mount's lease on one directory.
type leaseState struct {
	renewal uint64
	sent    time.Time // when the last renewal was sent (the Tree's clock)
	used    time.Time // when a name was last added under it
	etag    string
	// sealed: the directory is being removed by this mount (its rmdir):
	// no name is added until the lease is taken again.
	sealed bool
	// renewing: the refresher's renewal of it is in flight.
	renewing bool
	// frags is the directory's fragment count as its seal said at the last
	// renewal (0: the seal says none; frags.go).
	frags uint32
}

// errRemoved is the error of a name added to a directory being removed.
func errRemoved(dir namespace.Ino) error {
	return fmt.Errorf("directory %d is removed or being removed: %w", dir, namespace.ErrNotExist)
}

// leaseFor makes sure this mount holds a lease on dir, renewed less than
// LeaseRenew ago and with no seal seen, before it adds a name there, to
// dir's fragments as frags counts them. The root needs none: it is never
// removed, and its fragment count never changes. A fragment count the
// seal says, other than frags, is set in the cache and answered with an
// error matching ErrLocked (the caller reads it and tries again, see
// fragsAgree); so is a change of the count in progress. When dir is
// removed, the cached path of dir is made stale (refused).
func (t *Tree) leaseFor(ctx context.Context, dir namespace.Ino, frags uint32) error {
	if dir == namespace.RootIno {
		return nil
	}
	err := t.takeLease(ctx, dir, frags)
	t.refused(err, dir)
	return err
}

// takeLease is leaseFor's work on a directory other than the root.
func (t *Tree) takeLease(ctx context.Context, dir namespace.Ino, frags uint32) error {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	now := t.clock()
	ls := t.leases[dir]
	if ls != nil && !ls.sealed && now.Sub(ls.sent) < LeaseRenew {
		ls.used = now
		return t.fragsAgree(dir, ls.frags, frags)
	}
	t.dropIdleLocked(ctx, now)
	if ls == nil {
		ls = &leaseState{}
		t.leases[dir] = ls
	}
	key, err := LeaseKey(t.root, dir, t.mount)
	if err != nil {
		return err
	}
	ls.renewal++
	l := &Lease{Dir: dir, Mount: t.mount, Renewal: ls.renewal}
	body, err := EncodeLease(l)
	if err != nil {
		return err
	}
	sent := t.clock()
	r, err := put(ctx, t.st, key, body, staging.Conditions{}, kindLease, DecodeLease,
		func(cur *Lease) bool { return cur.Mount == t.mount && cur.Renewal == l.Renewal })
	if err != nil {
		return fmt.Errorf("lease on directory %d: %w", dir, err)
	}
	si, err := t.readSeal(ctx, dir)
	if err != nil {
		return fmt.Errorf("lease on directory %d: %w", dir, err)
	}
	if si.sealed || si.moving {
		// Stop adding names there, and let the remover go on at once.
		delete(t.leases, dir)
		if err := t.st.Delete(ctx, key); err != nil {
			t.log.Warn("namespace v2: a lease on a sealed directory not deleted: its remover waits it out",
				zap.String("key", key), zap.Error(err))
		}
		if si.moving {
			// Its fragment count is being changed: try again once decided.
			sk, _ := SealKey(t.root, dir)
			return lockedErr(sk)
		}
		return errRemoved(dir)
	}
	ls.sent, ls.used, ls.etag, ls.sealed, ls.frags = sent, t.clock(), r.etag, false, si.frags
	return t.fragsAgree(dir, si.frags, frags)
}

// dropIdleLocked deletes the leases not used for LeaseIdle, so that a
// remover need not wait for them to run out. Best effort: a lease left is
// waited out.
func (t *Tree) dropIdleLocked(ctx context.Context, now time.Time) {
	for dir, ls := range t.leases {
		if ls.sealed || now.Sub(ls.used) < LeaseIdle {
			continue
		}
		delete(t.leases, dir)
		if key, err := LeaseKey(t.root, dir, t.mount); err == nil {
			if err := t.st.Delete(ctx, key); err != nil {
				t.log.Debug("namespace v2: an idle lease not deleted", zap.String("key", key), zap.Error(err))
			}
		}
	}
}

// dropLeases deletes every lease this mount holds (Close).
func (t *Tree) dropLeases(ctx context.Context) {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	for dir := range t.leases {
		delete(t.leases, dir)
		if key, err := LeaseKey(t.root, dir, t.mount); err == nil {
			_ = t.st.Delete(ctx, key)
		}
	}
}

// sealInfo is what a directory's seal says to a mount adding names there.
type sealInfo struct {
	// sealed: removed, or being removed: add nothing.
	sealed bool
	// moving: its fragment count is being changed (frags.go): wait.
	moving bool
	// frags: its fragment count, when the seal says it (0: it says none,
	// and the count is the one the directory was made with).
	frags uint32
}

// readSeal reads dir's seal: a removal's whose change is committed or not
// decided seals it; one decided abort (left by its remover, see unseal, or
// by a remover that died) does not, and says the count it had (was). A
// change of the fragment count not decided is waited for, or decided abort
// once its seal is older than TxGrace (its mount died: as Resolve does
// with a lock); decided commit, it says the count it set. The trim keeps
// the decision a seal names.
func (t *Tree) readSeal(ctx context.Context, dir namespace.Ino) (sealInfo, error) {
	key, err := SealKey(t.root, dir)
	if err != nil {
		return sealInfo{}, err
	}
	s, info, err := read(ctx, t.st, key, kindSeal, DecodeSeal)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return sealInfo{}, nil
	case err != nil:
		return sealInfo{}, err
	}
	out, err := t.outcome(ctx, s.Tx)
	if err != nil {
		return sealInfo{}, err
	}
	if out == "" && s.Frags != 0 && t.p.now().Sub(info.LastModified) > t.p.txGrace {
		x, err := t.p.decide(ctx, &Decision{Tx: s.Tx, Outcome: Abort})
		if err != nil {
			return sealInfo{}, err
		}
		out = x.Outcome
	}
	switch {
	case s.Frags == 0 && out != Abort:
		return sealInfo{sealed: true}, nil
	case out == "":
		return sealInfo{moving: true}, nil
	case out == Commit:
		return sealInfo{frags: s.Frags}, nil
	}
	return sealInfo{frags: s.Was}, nil
}

// outcome is the decision of change tx that stands: Commit, Abort, or ""
// when none is stored.
func (t *Tree) outcome(ctx context.Context, tx string) (string, error) {
	key, err := DecisionKey(t.root, tx)
	if err != nil {
		return "", err
	}
	x, _, err := read(ctx, t.st, key, kindDecision, DecodeDecision)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return x.Outcome, nil
}

// seal writes the seal of dir for change tx, whose lock on dir's name is
// held: If-None-Match, or If-Match over the seal of a change decided abort
// (a remover that died, or one that lost) or of a change of the fragment
// count decided commit. A seal of a committed removal says the directory
// is gone (ErrNotExist). was is dir's fragment count under the lock; to
// the count tx sets (0: tx removes dir). The seal holds was when tx sets a
// count or the seal it replaces held one (Seal).
func (t *Tree) seal(ctx context.Context, tx string, dir namespace.Ino, was, to uint32) error {
	key, err := SealKey(t.root, dir)
	if err != nil {
		return err
	}
	sl := &Seal{Dir: dir, Tx: tx, Frags: to}
	if to != 0 {
		sl.Was = was
	}
	body, err := EncodeSeal(sl)
	if err != nil {
		return err
	}
	cond := staging.Conditions{IfNoneMatch: true}
	for range maxRounds {
		r, err := put(ctx, t.st, key, body, cond, kindSeal, DecodeSeal, func(cur *Seal) bool { return cur.Tx == tx })
		switch {
		case err != nil:
			return fmt.Errorf("seal directory %d: %w", dir, err)
		case r.landed:
			return nil
		case r.cur == nil:
			cond = staging.Conditions{IfNoneMatch: true}
			continue
		}
		out, err := t.outcome(ctx, r.cur.Tx)
		if err != nil {
			return fmt.Errorf("seal directory %d: %w", dir, err)
		}
		if out == "" {
			// Its change holds no lock on dir's name (this change does),
			// so it can never commit: decide it aborted.
			x, err := t.p.decide(ctx, &Decision{Tx: r.cur.Tx, Outcome: Abort})
			if err != nil {
				return fmt.Errorf("seal directory %d: %w", dir, err)
			}
			out = x.Outcome
		}
		if out == Commit && r.cur.Frags == 0 {
			return errRemoved(dir)
		}
		if r.cur.Was != 0 && sl.Was == 0 {
			// Carry the count forward: a mount whose lease this change
			// waits out learns it from the seal whatever the outcome.
			sl.Was = was
			if body, err = EncodeSeal(sl); err != nil {
				return err
			}
		}
		cond = staging.Conditions{IfMatch: r.curInfo.ETag}
	}
	return fmt.Errorf("seal directory %d: %w", dir, ErrContended)
}

// unseal ends this mount's removal of dir after its change was decided
// abort: it adds names there again. The seal stays: it is an aborted
// change's, which seals nothing (sealed), and the next remover writes over
// it If-Match. Deleting it would race that remover: once the abort is
// decided another mount may lock dir's name and write its own seal over
// this one, which an unconditional DELETE (the store has no other) would
// then delete, letting a mount add a name to a directory that remover is
// removing. The abort's decision stays while the seal names it (trim.go).
func (t *Tree) unseal(dir namespace.Ino) {
	t.leaseMu.Lock()
	if ls := t.leases[dir]; ls != nil && ls.sealed {
		delete(t.leases, dir)
	}
	t.leaseMu.Unlock()
}

// waitLeases waits until no lease on dir lets its holder add a name: each
// listed lease is deleted, or keeps one ETag for LeaseTerm plus 1 % by this
// mount's clock. This mount's own lease is dropped first.
func (t *Tree) waitLeases(ctx context.Context, dir namespace.Ino) error {
	t.leaseMu.Lock()
	t.leases[dir] = &leaseState{sealed: true}
	t.leaseMu.Unlock()
	own, err := LeaseKey(t.root, dir, t.mount)
	if err != nil {
		return err
	}
	if err := t.st.Delete(ctx, own); err != nil {
		return fmt.Errorf("delete own lease on %d: %w", dir, err)
	}
	prefix := rootPrefix(t.root) + dirPrefix + "lease/" + hexN(uint64(dir), inoDigits) + "/"
	objs, err := staging.ListAll(ctx, t.st, prefix)
	if err != nil {
		return fmt.Errorf("list leases on %d: %w", dir, err)
	}
	wait := LeaseTerm + LeaseTerm/100
	for _, o := range objs {
		if o.Key == own {
			continue
		}
		etag, since := o.ETag, t.clock()
		for {
			info, err := t.st.Head(ctx, o.Key)
			if errors.Is(err, staging.ErrNotFound) {
				break
			}
			if err != nil {
				return fmt.Errorf("read lease %s: %w", staging.TruncKey(o.Key), err)
			}
			if info.ETag != etag {
				etag, since = info.ETag, t.clock() // renewed before it saw the seal
			}
			if t.clock().Sub(since) > wait {
				break
			}
			if err := t.sleep(ctx, leasePoll); err != nil {
				return err
			}
		}
	}
	return nil
}

// empty says whether dir holds no name, for a remover that has sealed it and
// waited out its leases: a LIST of each fragment, then each name read. A
// name locked by a change not decided that would bind it counts as a name
// (a rename into dir in flight). A name that cannot be read (damaged)
// fails it: emptiness must be known.
func (t *Tree) empty(ctx context.Context, dir namespace.Ino, frags uint32) (bool, error) {
	keys, err := t.listFrags(ctx, dir, frags)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		r, err := t.p.Resolve(ctx, dir, frags, k.name)
		if err != nil {
			return false, fmt.Errorf("read %q in directory %d: %w", k.name, dir, err)
		}
		if r.Bound != nil || r.Pending && r.Dentry != nil && r.Dentry.Lock != nil && r.Dentry.Lock.To != nil {
			return false, nil
		}
	}
	return true, nil
}

// sealEmpty seals dir, of frags fragments, for change tx (whose lock on
// dir's name is held; to is the fragment count it sets, 0 when it removes
// dir), waits out its leases and says whether it is empty. On an error or
// a directory with names, the caller decides abort and then unseals.
func (t *Tree) sealEmpty(ctx context.Context, tx string, dir namespace.Ino, frags, to uint32) (bool, error) {
	if err := t.seal(ctx, tx, dir, frags, to); err != nil {
		return false, err
	}
	if err := t.waitLeases(ctx, dir); err != nil {
		return false, err
	}
	return t.empty(ctx, dir, frags)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// renewAhead renews the leases in use whose last renewal was sent 3/4 of
// LeaseRenew ago or more, off the create path (see the top of this file).
// leaseMu is not held across the requests, so that creates under other
// leases (or under this one, still valid) go on meanwhile.
func (t *Tree) renewAhead(ctx context.Context) {
	type job struct {
		dir namespace.Ino
		ls  *leaseState
		n   uint64
	}
	var jobs []job
	now := t.clock()
	t.leaseMu.Lock()
	for dir, ls := range t.leases {
		if ls.sealed || ls.renewing || now.Sub(ls.used) >= LeaseIdle || now.Sub(ls.sent) < LeaseRenew*3/4 {
			continue
		}
		ls.renewal++
		ls.renewing = true
		jobs = append(jobs, job{dir: dir, ls: ls, n: ls.renewal})
	}
	t.leaseMu.Unlock()
	for _, j := range jobs {
		t.renewLease(ctx, j.dir, j.ls, j.n)
	}
}

// renewLease writes renewal n of this mount's lease ls on dir and reads the
// seal, and makes it the lease's last renewal if none was begun since.
func (t *Tree) renewLease(ctx context.Context, dir namespace.Ino, ls *leaseState, n uint64) {
	defer func() {
		t.leaseMu.Lock()
		ls.renewing = false
		t.leaseMu.Unlock()
	}()
	key, err := LeaseKey(t.root, dir, t.mount)
	if err != nil {
		return
	}
	body, err := EncodeLease(&Lease{Dir: dir, Mount: t.mount, Renewal: n})
	if err != nil {
		return
	}
	sent := t.clock()
	r, err := put(ctx, t.st, key, body, staging.Conditions{}, kindLease, DecodeLease,
		func(cur *Lease) bool { return cur.Mount == t.mount && cur.Renewal == n })
	if err != nil {
		t.log.Debug("namespace v2: a lease renewed ahead failed; the next create renews it", zap.String("key", key), zap.Error(err))
		return
	}
	si, err := t.readSeal(ctx, dir)
	if err != nil {
		t.log.Debug("namespace v2: a seal read after a renewal failed; the next create renews", zap.String("key", key), zap.Error(err))
		return
	}
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	if t.leases[dir] != ls || ls.renewal != n || ls.sealed {
		return // taken again, dropped or sealed since: that stands
	}
	if si.sealed || si.moving {
		delete(t.leases, dir)
		if err := t.st.Delete(ctx, key); err != nil {
			t.log.Warn("namespace v2: a lease on a sealed directory not deleted: its remover waits it out",
				zap.String("key", key), zap.Error(err))
		}
		return
	}
	ls.sent, ls.etag, ls.frags = sent, r.etag, si.frags
}
