package namespace

import (
	"context"
	"fmt"
	"time"
)

// Changes that land later.
//
// A program that writes a file usually sets its attributes on the open
// descriptor before closing it (tar -x: futimens, fchown, fchmod; cp -p the
// same): three changes, each a log entry in sequence, each a round trip,
// for a file whose data is not published until the close anyway. SetAttrLater
// makes such a change without the wait: it is checked against the state,
// queued for the committer like any change (so it shares the entry of the
// changes around it), shown at once by GetNode and Lookup, and lands in the
// background, typically within one round trip. The mount waits for it, with
// the file's data, at the file's next fsync or close, which report its
// error: what a program was told is safe when fsync or close returns is
// still in the store by then.
//
// The mount (fs/fusefs) defers only times this way: a change of mode or
// owner is made with SetAttr, in the store before it returns or failed.
//
// Until it lands, only this mount sees the change; a crash of the mount
// before it lands loses it (the file's close, which would have reported it,
// has not returned either). The order of the log is the order the changes
// were made in: the committer takes its queue in order.
//
// Such a change does not start the committer: the changes a program makes
// one after another on a file (three for tar) would otherwise go in two
// entries, one after the other. It is sent with the next change that waits,
// at Kick (the mount kicks when the file's fsync or close begins, so that
// the entry goes with the file's data), or laterDelay after it was made,
// whichever comes first.

// laterDelay bounds how long a change made with SetAttrLater waits for
// company before it is sent: what it adds to another mount's view of it.
const laterDelay = 20 * time.Millisecond

// laterAttr is the change a SetAttrLater shows until it lands: the fields
// set, and the time it was made (standing in for the entry's own time).
type laterAttr struct {
	a attrRec
	t int64
}

// Pending is a change made with SetAttrLater.
type Pending struct {
	ns *Namespace
	p  *pending
}

// Done is closed once the change has landed or failed.
func (w *Pending) Done() <-chan struct{} { return w.p.fin }

// Wait sends the change if it was not yet (Kick) and waits until it has
// landed (nil) or failed (its error), or ctx ends (ctx's error; the change
// goes on).
func (w *Pending) Wait(ctx context.Context) error {
	w.ns.Kick()
	select {
	case <-w.p.fin:
		return w.p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetAttrLater is SetAttr without waiting for the store (see above). It
// fails at once only when the change does not apply to the state as this
// mount knows it; otherwise it returns the node as it will be, and the
// Pending of the change.
func (ns *Namespace) SetAttrLater(ino Ino, a SetAttr) (Node, *Pending, error) {
	rec := attrOf(a)
	o := op{Kind: opSetAttr, Ino: ino, Attr: rec}
	t := ns.opts.Now().UnixNano()
	p := &pending{o: o, size: opSize(&o), ctx: context.Background(), res: make(chan error, 1),
		later: &laterAttr{a: *rec, t: t}, fin: make(chan struct{})}
	ns.mu.Lock()
	n, err := ns.st.get(ino)
	if err == nil {
		// Checked on the state as it stands; the committer checks it again
		// on the state the entry follows.
		err = ns.st.applySetAttr(&o, t, true)
	}
	if err != nil {
		ns.mu.Unlock()
		return Node{}, nil, fmt.Errorf("setattr %d: %w", ino, err)
	}
	if ns.shown == nil {
		ns.shown = map[Ino][]*pending{}
	}
	ns.shown[ino] = append(unfailed(ns.shown[ino]), p)
	out := ns.viewLocked(n)
	ns.mu.Unlock()
	ns.enqueueLater(p)
	return out, &Pending{ns: ns, p: p}, nil
}

// enqueueLater queues p without starting the committer: laterDelay from now
// at the latest, or at the next change that waits, or at Kick.
func (ns *Namespace) enqueueLater(p *pending) {
	ns.qmu.Lock()
	defer ns.qmu.Unlock()
	ns.queue = append(ns.queue, p)
	if !ns.committing && ns.laterTimer == nil {
		ns.laterTimer = time.AfterFunc(laterDelay, ns.Kick)
	}
}

// Kick sends what is queued (changes made with SetAttrLater) now: it starts
// the committer if it does not run.
func (ns *Namespace) Kick() {
	ns.qmu.Lock()
	defer ns.qmu.Unlock()
	if ns.laterTimer != nil {
		ns.laterTimer.Stop()
		ns.laterTimer = nil
	}
	if len(ns.queue) > 0 && !ns.committing {
		ns.committing = true
		ns.bg.Add(1)
		go ns.commitLoop()
	}
}

// viewLocked is node n as this mount shows it: the state, then the changes
// made with SetAttrLater that have not landed, in order (one that failed is
// shown no more). mu held.
func (ns *Namespace) viewLocked(n *node) Node {
	out := n.public()
	for _, p := range ns.shown[n.ino] {
		select {
		case <-p.fin:
			continue
		default:
		}
		a := &p.later.a
		if a.Mode != nil && out.Kind != KindSymlink {
			out.Mode = *a.Mode
		}
		if a.Uid != nil {
			out.Uid = *a.Uid
		}
		if a.Gid != nil {
			out.Gid = *a.Gid
		}
		if a.Atime != nil {
			out.AtimeNs = *a.Atime
		}
		if a.Mtime != nil {
			out.MtimeNs = *a.Mtime
			out.MtimeSetNs = p.later.t
		}
		out.CtimeNs = p.later.t
		if a.Ctime != nil {
			out.CtimeNs = *a.Ctime
		}
	}
	return out
}

// unshowLocked stops showing the changes of ps made with SetAttrLater (they
// are in the state now), and forgets those of their nodes that failed. mu
// held, in the same hold as the state change, so that no reader sees a
// change twice or not at all.
func (ns *Namespace) unshowLocked(ps []*pending) {
	for _, p := range ps {
		if p.later == nil {
			continue
		}
		var q []*pending
		for _, x := range unfailed(ns.shown[p.o.Ino]) {
			if x != p {
				q = append(q, x)
			}
		}
		if len(q) == 0 {
			delete(ns.shown, p.o.Ino)
		} else {
			ns.shown[p.o.Ino] = q
		}
	}
}

// unfailed is ps without the changes that have finished (those that landed
// are never in shown: they leave it as they land; so these failed).
func unfailed(ps []*pending) []*pending {
	out := ps[:0:0]
	for _, p := range ps {
		select {
		case <-p.fin:
		default:
			out = append(out, p)
		}
	}
	return out
}
