package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// TestRenameOverFileOpenOnAnotherMount: a program on mount B holds X open
// and reads it while mount A saves a new version to a temporary file and
// renames it over X. B reads the old bytes, exactly, until it closes X; the
// old data stays until a cleaner deletes it, after its grace period, and then
// nothing of it is left. A mount that holds X open itself reads it as well.
func TestRenameOverFileOpenOnAnotherMount(t *testing.T) {
	v := newVolume(t)
	a := v.mount("ns_refresh=100ms")
	b := v.mount("ns_refresh=100ms")
	const n = 16 << 20 // larger than the read-ahead window, so B reads the store late
	randomFile(t, a.path("X"), n)
	old, err := os.ReadFile(a.path("X"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		fi, err := os.Stat(b.path("X"))
		if err != nil {
			return err
		}
		if fi.Size() != n {
			return fmt.Errorf("B sees size %d", fi.Size())
		}
		return nil
	})

	fb, err := os.Open(b.path("X"))
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	fa, err := os.Open(a.path("X"))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	got := make([]byte, n)
	const first = 64 << 10
	if _, err := io.ReadFull(fb, got[:first]); err != nil {
		t.Fatalf("B reads X before the rename: %v", err)
	}
	if _, err := fa.ReadAt(got[:first], 0); err != nil {
		t.Fatalf("A reads X before the rename: %v", err)
	}

	// Save-to-temp-then-rename on A.
	if err := os.WriteFile(a.path("X.tmp"), []byte("the new version"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a.path("X.tmp"), a.path("X")); err != nil {
		t.Fatal(err)
	}
	// The mount used to delete the old data two seconds after the rename,
	// once no handle of its own held it.
	time.Sleep(3 * time.Second)

	// A's own descriptor reads the old version until it closes.
	ga := make([]byte, n)
	if _, err := fa.ReadAt(ga, 0); err != nil && err != io.EOF {
		t.Fatalf("A's descriptor reads X after the rename: %v", err)
	}
	if !bytes.Equal(ga, old) {
		t.Fatal("A's descriptor reads bytes that are not the old version")
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := os.ReadFile(a.path("X")); err != nil || string(s) != "the new version" {
		t.Fatalf("A reads X by name: %q, %v", s, err)
	}

	half := n / 2
	if _, err := io.ReadFull(fb, got[first:half]); err != nil {
		t.Fatalf("B reads X after the rename: %v", err)
	}
	// A mount that goes away deletes nothing of it either.
	a.unmount()
	if _, err := io.ReadFull(fb, got[half:]); err != nil {
		t.Fatalf("B reads X after A unmounted: %v", err)
	}
	if !bytes.Equal(got, old) {
		t.Fatal("B reads bytes that are not the old version")
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		s, err := os.ReadFile(b.path("X"))
		if err != nil {
			return err
		}
		if string(s) != "the new version" {
			return fmt.Errorf("B reads %d bytes by name", len(s))
		}
		return nil
	})
	b.unmount()

	// The old version is an orphan of the namespace; a cleaner past its
	// grace deletes it whole.
	st := v.store()
	id := oneOrphan(t, st)
	reapOrphans(t, st)
	if left := countObjects(t, st, ckvolume.FilePrefix("", id)); left != 0 {
		t.Fatalf("%d objects of the replaced version left after the cleaner", left)
	}
}

// TestUnlinkedFileLeftToCleaner: a mount does not delete the data of a file
// it unlinked (another mount may hold it open); the cleaner does, after its
// grace period.
func TestUnlinkedFileLeftToCleaner(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	st := v.store()
	p := m.path("gone")
	if err := os.WriteFile(p, bytes.Repeat([]byte("z"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	id := oneOrphan(t, st)
	if countObjects(t, st, ckvolume.FilePrefix("", id)) == 0 {
		t.Fatal("the mount deleted the data of an unlinked file; it is the cleaner's")
	}
	// Within the grace period the cleaner keeps it.
	if rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Grace: time.Hour}); err != nil || len(rep.Orphans) != 0 {
		t.Fatalf("cleaner within the grace period: orphans %v, %v", rep.Orphans, err)
	}
	reapOrphans(t, st)
	if left := countObjects(t, st, ckvolume.FilePrefix("", id)); left != 0 {
		t.Fatalf("%d objects of the unlinked file left after the cleaner", left)
	}
	m = v.mount("")
	if ents, err := os.ReadDir(m.dir); err != nil || len(ents) != 0 {
		t.Fatalf("root after the cleaner: %v, %v", ents, err)
	}
}

// TestFsyncDir: fsync of a directory succeeds (programs that save
// atomically call it after the rename), and what it covers is in the store:
// a fresh mount sees the new name.
func TestFsyncDir(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	if err := os.Mkdir(m.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{m.dir, m.path("sub")} {
		tmp := filepath.Join(dir, "save.tmp")
		f, err := os.Create(tmp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("saved"); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "save")); err != nil {
			t.Fatal(err)
		}
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		serr := d.Sync()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if serr != nil {
			t.Fatalf("fsync of directory %s: %v", dir, serr)
		}
	}
	// Another mount of the same root, opened afterwards, reads the store only.
	other := v.mount("")
	for _, p := range []string{"save", "sub/save"} {
		if s, err := os.ReadFile(other.path(p)); err != nil || string(s) != "saved" {
			t.Fatalf("%s on a fresh mount: %q, %v", p, s, err)
		}
	}
	// The tree of old checkpoints is read-only: fsync has nothing to do.
	d, err := os.Open(other.path(".checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of .checkpoints: %v", err)
	}
}

// oneOrphan returns the file id of the one orphan the volume's namespace
// holds.
func oneOrphan(t *testing.T, st staging.Store) string {
	t.Helper()
	ns := openNames(t, st)
	defer ns.Close()
	o, err := ns.Orphans(context.Background())
	if err != nil || len(o) != 1 {
		t.Fatalf("namespace holds %d orphans, want 1: %v (%v)", len(o), o, err)
	}
	return o[0].FileID
}

// reapOrphans runs the cleaner twice, the second run as if its grace period
// had passed since the first found the orphans, and checks that it forgot
// every orphan.
func reapOrphans(t *testing.T, st staging.Store) {
	t.Helper()
	later := time.Now().Add(2 * time.Hour)
	if _, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Grace: time.Hour}); err != nil {
		t.Fatalf("cleaner: %v", err)
	}
	rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Grace: time.Hour, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatalf("cleaner: %v", err)
	}
	if len(rep.Orphans) == 0 {
		t.Fatal("the cleaner deleted no orphan")
	}
	ns := openNames(t, st)
	defer ns.Close()
	if o, err := ns.Orphans(context.Background()); err != nil || len(o) != 0 {
		t.Fatalf("namespace still holds orphans %v (%v)", o, err)
	}
}
