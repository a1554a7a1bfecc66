package nsv2

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Check counts the names, reports a damaged dentry and a name of a file
// whose objects have no head by key (a file with no objects is an empty
// one: nothing), and notes an orphan record whose name still binds its file
// and a lock decided longer than TxGrace ago.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	n := New(st, root, nil)
	store(t, st, dentryOf(name{1, 1, "empty"}, cid(1), fb(1)))
	store(t, st, dentryOf(name{1, 1, "headless"}, cid(2), fb(2)))
	store(t, st, dentryOf(name{1, 1, "gone"}, cid(3), nil))
	damaged := name{1, 1, "damaged"}.key(t)
	if _, err := st.Put(ctx, damaged, []byte("CKN2 not a dentry"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, _ := EncodeOrphan(&Orphan{FileID: cid(1), Ino: fb(1).Ino, Dir: 1, Frags: 1, Name: "empty", Change: cid(8)})
	rkey, _ := OrphanKey(root, cid(1))
	if _, err := st.Put(ctx, rkey, rec, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	etagA := store(t, st, dentryOf(nameA, cid(50), fb(5)))
	tx := cid(7)
	if _, err := n.Lock(ctx, tx, []Op{{Dir: nameA.dir, Frags: nameA.frags, Name: Name(nameA.name)}}, []Held{{ETag: etagA, Bound: fb(5)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Decide(ctx, &Decision{Tx: tx, Outcome: Commit, Ops: []Op{{Dir: nameA.dir, Frags: nameA.frags, Name: Name(nameA.name)}}}); err != nil {
		t.Fatal(err)
	}
	file := func(_ context.Context, id string) (bool, int, error) {
		if id == cid(2) {
			return false, 3, nil
		}
		return false, 0, nil
	}
	r, err := Check(ctx, st, root, time.Now().Add(time.Hour), file)
	if err != nil {
		t.Fatal(err)
	}
	if r.Files != 3 || r.Tombstones != 1 || r.Locked != 1 || r.Records != 1 {
		t.Fatalf("counts %+v", r)
	}
	var probs, notes []string
	for _, p := range r.Problems {
		probs = append(probs, p.String())
	}
	for _, p := range r.Notes {
		notes = append(notes, p.String())
	}
	if len(probs) != 2 || !strings.Contains(strings.Join(probs, "\n"), damaged) || !strings.Contains(strings.Join(probs, "\n"), "have no head") {
		t.Fatalf("problems %q; want the damaged dentry and the headless file", probs)
	}
	if len(notes) != 2 || !strings.Contains(strings.Join(notes, "\n"), rkey) || !strings.Contains(strings.Join(notes, "\n"), "decided longer than TxGrace") {
		t.Fatalf("notes %q; want the record without its tombstone and the old lock", notes)
	}
}
