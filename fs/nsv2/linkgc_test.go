package nsv2

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Check counts a file of several names once (by its inode object), counts
// its names as linked, checks its file's head once, and reports a name
// whose inode object is missing and an inode object that does not decode.
func TestCheckLinkedFile(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := openTree(t, st, 1)
	f := must(tr.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	must(tr.Link(ctx, f.Ino, namespace.RootIno, "g"))(t)
	must(tr.Link(ctx, f.Ino, namespace.RootIno, "h"))(t)
	p := must(tr.Create(ctx, namespace.RootIno, "p", 0o644, owner))(t)
	heads := map[string]int{}
	var mu sync.Mutex // Check reads files up to 32 at once
	file := func(_ context.Context, id string) (bool, int, error) {
		mu.Lock()
		defer mu.Unlock()
		heads[id]++
		return id != f.FileID, 2, nil
	}
	check := func() *CheckReport {
		t.Helper()
		clear(heads)
		return must(Check(ctx, st, root, time.Now(), file))(t)
	}
	r := check()
	if r.Files != 2 || r.Linked != 3 || heads[f.FileID] != 1 || heads[p.FileID] != 1 {
		t.Fatalf("counts %+v, heads read %v; want 2 files (the linked one once), 3 linked names, each head read once", r, heads)
	}
	ikey := inodeKeyOf(f.Ino)
	if len(r.Problems) != 1 || r.Problems[0].Key != ikey || !strings.Contains(r.Problems[0].Err.Error(), "no head") {
		t.Fatalf("problems %v; want the linked file's missing head, by its inode object", r.Problems)
	}
	if _, err := st.Put(ctx, ikey, []byte("CKN2 not an inode object"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r = check()
	if len(r.Problems) != 1 || r.Problems[0].Key != ikey {
		t.Fatalf("problems %v; want the damaged inode object", r.Problems)
	}
	if err := st.Delete(ctx, ikey); err != nil {
		t.Fatal(err)
	}
	r = check()
	missing := 0
	for _, pr := range r.Problems {
		if strings.Contains(pr.Err.Error(), "no inode object") {
			missing++
		}
	}
	if missing != 3 {
		t.Fatalf("problems %v; want each of the 3 names of a node without its inode object", r.Problems)
	}
}

// A decided change whose inode object is still locked by it (its
// coordinator died after deciding) keeps its decision: a trim resolves the
// lock from it as a reader does, and only a later trim deletes it. Trimmed
// at once, the lock would read as undecided and be aborted though it
// committed.
func TestTrimKeepsDecisionOfLockedInode(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := openTree(t, st, 1)
	f := must(tr.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	must(tr.Link(ctx, f.Ino, namespace.RootIno, "g"))(t)
	n := New(st, root, nil)
	cur := must(n.ResolveInode(ctx, f.Ino))(t)
	tx := cid(9)
	to := *cur.Inode
	to.Change = tx
	to.Node.Mode = 0o600
	ops := []Op{{Ino: f.Ino, Inode: &to}}
	must(n.Lock(ctx, tx, ops, []Held{{ETag: cur.ETag, Inode: cur.Inode}}))(t)
	must(n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: ops}))(t)
	xkey, _ := DecisionKey(root, tx)
	r := trimAt(t, st, 2*TrimGrace, false)
	if !has(t, st, xkey) || r.Kept != 1 {
		t.Fatalf("the decision of a change whose inode object is locked went (kept %d)", r.Kept)
	}
	in := must(n.ResolveInode(ctx, f.Ino))(t)
	if in.Locked || in.Inode.Node.Mode != 0o600 {
		t.Fatalf("inode object after the trim: %+v; want resolved to the commit", in)
	}
	trimAt(t, st, 2*TrimGrace, false)
	if has(t, st, xkey) {
		t.Fatal("the decision stays after its inode object was resolved")
	}
	got := must(openTree(t, st, 2).Lookup(ctx, namespace.RootIno, "g"))(t)
	if got.Mode != 0o600 || got.Nlink != 2 {
		t.Fatalf("g after the trims: %+v; want the committed mode", got)
	}
}

// The record of the unlink of a node's last name whose change committed,
// its name resolved and its inode object still locked (its coordinator
// died before resolving it): the object's body before the change still
// counts a name, so the record is never judged stale from it (that would
// delete the record of a file with no name); the cleaner resolves the lock
// as a reader does, and the record is then an orphan's.
func TestRecordOfLinkedNodeWithLockedInode(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := openTree(t, st, 1)
	f := must(tr.Create(ctx, namespace.RootIno, "f", 0o644, owner))(t)
	must(tr.Link(ctx, f.Ino, namespace.RootIno, "g"))(t)
	must(tr.Unlink(ctx, namespace.RootIno, "f"))(t)
	frags := must(tr.dirFrags(namespace.RootIno))(t)
	n := New(st, root, nil)
	g := must(n.Resolve(ctx, namespace.RootIno, frags, "g"))(t)
	cur := must(n.ResolveInode(ctx, f.Ino))(t)
	tx := cid(11)
	to := *cur.Inode
	to.Nlink, to.Change = 0, tx
	ops := []Op{{Dir: namespace.RootIno, Frags: frags, Name: "g"}, {Ino: f.Ino, Inode: &to}}
	rec, _ := EncodeOrphan(&Orphan{FileID: f.FileID, Ino: f.Ino, Dir: namespace.RootIno, Frags: frags, Name: "g", Change: tx})
	rkey, _ := OrphanKey(root, f.FileID)
	if _, err := st.Put(ctx, rkey, rec, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	locks := must(n.Lock(ctx, tx, ops, []Held{{ETag: g.ETag, Bound: g.Bound}, {ETag: cur.ETag, Inode: cur.Inode}}))(t)
	must(n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: ops}))(t)
	for _, l := range locks {
		if l.Dentry != nil {
			must(n.resolveOne(ctx, l, Commit))(t)
		}
	}
	later := time.Now().Add(2 * TxGrace)
	recs := must(NewIndex(st, root).Records(ctx, 0, later, nil))(t)
	if len(recs) != 1 || recs[0].State != RecordKept {
		t.Fatalf("judged without resolving: %+v; want kept (the inode object is locked)", recs)
	}
	x := NewIndex(st, root)
	x.Resolve = true
	recs = must(x.Records(ctx, 0, later, nil))(t)
	if len(recs) != 1 || recs[0].State != RecordOrphan {
		t.Fatalf("judged resolving: %+v; want an orphan's", recs)
	}
}
