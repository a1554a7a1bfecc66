package test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
)

// nsOrphans opens the namespace of the volume afresh and returns its
// orphans.
func nsOrphans(t *testing.T, st staging.Store) []namespace.Orphan {
	t.Helper()
	ns, err := namespace.Open(context.Background(), st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	return ns.Orphans()
}

// TestOrphansWithoutObjectsForgotten: a shell creates and removes an empty
// file 300 times (lock files, empty temporary files): each is an orphan of
// the namespace with no object under f/. One cleaner run with no grace
// forgets them all.
func TestOrphansWithoutObjectsForgotten(t *testing.T) {
	need(t, "sh")
	v := newVolume(t)
	m := v.mount("")
	run(t, m.dir, "sh", "-c", `i=0; while [ $i -lt 300 ]; do : > lock; rm lock; i=$((i+1)); done`)
	m.unmount()
	st := v.store()
	if n := len(nsOrphans(t, st)); n != 300 {
		t.Fatalf("%d orphans before the cleaner; want 300", n)
	}
	rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Orphans) != 300 {
		t.Fatalf("the cleaner forgot %d orphans; want 300", len(rep.Orphans))
	}
	if or := nsOrphans(t, st); len(or) != 0 {
		t.Fatalf("%d orphans left", len(or))
	}
	m = v.mount("")
	if ents, err := os.ReadDir(m.dir); err != nil || len(ents) != 0 {
		t.Fatalf("root after the cleaner: %v, %v", ents, err)
	}
}

// TestGCCopyWrittenOverLetsSourceGo: cp copies X to D by reference, D is
// written over (echo), X removed: no retained checkpoint of D names X's
// objects any more, so `ckptfs gc --keep 1` with no grace reaps X whole,
// and D reads what echo wrote.
func TestGCCopyWrittenOverLetsSourceGo(t *testing.T) {
	need(t, "cp", "sh")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	m := v.mount("")
	randomFile(t, m.path("X"), 1<<20)
	run(t, m.dir, "cp", "X", "D")
	run(t, m.dir, "sh", "-c", "echo new > D")
	if err := os.Remove(m.path("X")); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	st := v.store()
	or := nsOrphans(t, st)
	if len(or) != 1 {
		t.Fatalf("orphans %v; want X", or)
	}
	x := cleaner.FilesPrefix("") + or[0].FileID + "/"
	if countObjects(t, st, x) == 0 {
		t.Fatal("X has no objects: the test proves nothing")
	}
	store, opts, env := s3Args(t, v)
	for range 2 {
		cmd := exec.Command(bin, "gc", "-o", opts, "--keep", "1", "--grace", "0", "--min-age", "0", "--ns-lag", "0", store)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gc: %v\n%s", err, out)
		}
	}
	if n := countObjects(t, st, x); n != 0 {
		t.Fatalf("%d objects of X left", n)
	}
	if or := nsOrphans(t, st); len(or) != 0 {
		t.Fatalf("orphans left: %v", or)
	}
	m = v.mount("")
	if b, err := os.ReadFile(m.path("D")); err != nil || string(b) != "new\n" {
		t.Fatalf("D reads %q, %v", b, err)
	}
}
