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
