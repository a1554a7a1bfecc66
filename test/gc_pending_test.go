package test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// nsOrphans opens the namespace of the volume afresh and returns its
// orphans.
func nsOrphans(t *testing.T, st staging.Store) []namespace.Orphan {
	t.Helper()
	ns := openNames(t, st)
	defer ns.Close()
	o, err := ns.Orphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return o
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
	start := time.Now()
	rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc: %v", time.Since(start))
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
	x := ckvolume.FilePrefix("", or[0].FileID)
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

// TestDroppedCheckpointReadOnAnotherMount: mount B reads an old checkpoint
// of a file (.checkpoints) while mount A writes the file twice more and a
// cleaner with --keep 1 runs, as if an hour after the checkpoint was written
// (its objects are old): B reads the whole checkpoint, exactly, since the
// cleaner counts the minimum age from the run that dropped it.
func TestDroppedCheckpointReadOnAnotherMount(t *testing.T) {
	v := newVolume(t)
	a := v.mount("")
	b := v.mount("ns_refresh=100ms")
	const n = 16 << 20 // larger than the read-ahead window, so B reads the store late
	randomFile(t, a.path("f"), n)
	want, err := os.ReadFile(a.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	k, err := syscall.Getxattr(a.path("f"), "user.ckptfs.cno", buf)
	if err != nil {
		t.Fatal(err)
	}
	old := b.path(".checkpoints/f/" + string(buf[:k]))
	var fb *os.File
	waitFor(t, 10*time.Second, func() error {
		var err error
		fb, err = os.Open(old)
		return err
	})
	defer fb.Close()
	got := make([]byte, n)
	const first = 64 << 10
	if _, err := io.ReadFull(fb, got[:first]); err != nil {
		t.Fatalf("B reads the checkpoint: %v", err)
	}
	randomFile(t, a.path("f"), n)
	randomFile(t, a.path("f"), n)
	later := time.Now().Add(time.Hour)
	rep, err := cleaner.CleanVolume(context.Background(), v.store(), "", cleaner.Options{Keep: 1, Grace: time.Hour, MinAge: 10 * time.Minute, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Pending) == 0 {
		t.Fatal("the cleaner found nothing unreferenced: the test proves nothing")
	}
	if _, err := io.ReadFull(fb, got[first:]); err != nil {
		t.Fatalf("B reads the dropped checkpoint after the cleaner: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("B read bytes that are not the checkpoint's")
	}
}

// TestGCBinaryWaitsNamespaceLag: `ckptfs gc` with no grace still keeps a
// file removed a moment ago for its default --ns-lag (another mount's view
// of the namespace may name it), and reaps it with --ns-lag 0.
func TestGCBinaryWaitsNamespaceLag(t *testing.T) {
	bin := ckptfsBinary(t)
	v := newVolume(t)
	m := v.mount("")
	randomFile(t, m.path("gone"), 256<<10)
	if err := os.Remove(m.path("gone")); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	st := v.store()
	store, opts, env := s3Args(t, v)
	gc := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(append([]string{"gc", "-o", opts, "--grace", "0", "--min-age", "0"}, args...), store)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gc %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := gc()
	if len(nsOrphans(t, st)) != 1 || !bytes.Contains([]byte(out), []byte("1 orphaned files pending")) {
		t.Fatalf("gc with the default namespace lag reaped the file just removed:\n%s", out)
	}
	gc("--ns-lag", "0")
	if or := nsOrphans(t, st); len(or) != 0 {
		t.Fatalf("orphans left with --ns-lag 0: %v", or)
	}
	if n := countObjects(t, st, ckvolume.FilesPrefix("")); n != 0 {
		t.Fatalf("%d objects left", n)
	}
}
