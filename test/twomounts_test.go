package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
)

// modeOf is the permission bits stat shows for path.
func modeOf(path string) (os.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Mode().Perm(), nil
}

// TestMultiChmodOfOpenFileIsStored: a chmod of a file a process holds open
// is in the store before it returns, or it fails: with the namespace log
// refusing appends, chmod and fchmod fail and the mode stays as it was, on
// this mount and on another one, after the store recovers too.
func TestMultiChmodOfOpenFileIsStored(t *testing.T) {
	v := newVolume(t)
	var faults *faulty.Store
	a := v.mountWrapped("ns_refresh=100ms", func(st staging.Store) staging.Store {
		faults = faulty.New(st, 1)
		return faults
	})
	b := v.mount("ns_refresh=100ms")
	if err := os.WriteFile(a.path("secret"), []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.path("secret"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(" v2")); err != nil {
		t.Fatal(err)
	}

	refuse := faults.Add(faulty.Rule{Op: staging.OpPut, Match: namesWrite})
	if err := os.Chmod(a.path("secret"), 0o600); err == nil {
		t.Error("chmod 600 of an open file returned success with the namespace log refusing appends")
	}
	if err := f.Chmod(0o600); err == nil {
		t.Error("fchmod 600 of an open file returned success with the namespace log refusing appends")
	}
	if err := os.Chown(a.path("secret"), 65534, 65534); err == nil {
		t.Error("chown of an open file returned success with the namespace log refusing appends")
	}
	if m, err := modeOf(a.path("secret")); err != nil || m != 0o644 {
		t.Errorf("after the refused chmod the mode is %v (%v), want 0644", m, err)
	}
	faults.Remove(refuse)

	// Nothing of the refused changes is left to land later.
	if err := f.Sync(); err != nil {
		t.Errorf("fsync after the store recovered: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("close after the store recovered: %v", err)
	}
	for _, m := range []*mount{a, b} {
		waitFor(t, 5*time.Second, func() error {
			got, err := os.ReadFile(m.path("secret"))
			if err != nil {
				return err
			}
			if string(got) != "v1 v2" {
				return fmt.Errorf("reads %q", got)
			}
			return nil
		})
		fi, err := os.Stat(m.path("secret"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v after the refused chmod, want 0644", m.dir, fi.Mode().Perm())
		}
	}

	// With the store back, a chmod of an open file is seen everywhere.
	g, err := os.OpenFile(a.path("secret"), os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := os.Chmod(a.path("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		if m, err := modeOf(b.path("secret")); err != nil || m != 0o600 {
			return fmt.Errorf("the other mount shows mode %v (%v), want 0600", m, err)
		}
		return nil
	})
}

// TestMultiCreateWithoutExcl: an open with O_CREAT and without O_EXCL of a
// name another mount has just made opens that file, however recent the
// name: two mounts, many rounds of both opening a new name at once (dd:
// O_WRONLY|O_CREAT, each writing its own block; sh: echo >>), and no open
// fails; both writes are in the file on both mounts. O_EXCL stays strict.
func TestMultiCreateWithoutExcl(t *testing.T) {
	need(t, "dd", "sh")
	v := newVolume(t)
	a := v.mount("")
	b := v.mount("")
	const rounds = 12
	both := func(name string, cmd func(m *mount, who int) (string, error)) {
		t.Helper()
		errs := make(chan error, 2)
		for who, m := range []*mount{a, b} {
			go func() {
				out, err := cmd(m, who)
				if err != nil {
					err = fmt.Errorf("%s on mount %d: %v: %s", name, who, err, out)
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
	for i := range rounds {
		name := fmt.Sprintf("dd-%02d", i)
		both(name, func(m *mount, who int) (string, error) {
			// Each its own 1 MiB block, so that neither write replaces
			// the other's when the two mounts publish.
			return runErr(m.dir, "sh", "-c", fmt.Sprintf("printf %d | dd of=%s bs=1M seek=%d conv=notrunc status=none", who, name, who))
		})
		name = fmt.Sprintf("log-%02d", i)
		both(name, func(m *mount, who int) (string, error) {
			return runErr(m.dir, "sh", "-c", fmt.Sprintf("echo %d >> %s", who, name))
		})
	}
	if t.Failed() {
		t.FailNow()
	}
	for i := range rounds {
		name := fmt.Sprintf("dd-%02d", i)
		for _, m := range []*mount{a, b} {
			waitFor(t, 10*time.Second, func() error {
				got, err := os.ReadFile(m.path(name))
				if err != nil {
					return err
				}
				if len(got) != 1<<20+1 || got[0] != '0' || got[1<<20] != '1' {
					return fmt.Errorf("%s: %d bytes, want both writes (%d bytes)", name, len(got), 1<<20+1)
				}
				return nil
			})
		}
	}

	// O_EXCL stays strict across mounts.
	if err := os.WriteFile(a.path("excl"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := os.OpenFile(b.path("excl"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("O_EXCL create of a name another mount made: %v, want EEXIST", err)
	}
}

// TestMultiReapedFileStaysGone: a file removed on one mount and deleted by
// the cleaner is gone on another mount whose view of the names lags (it
// reads the log once a minute here): its open and stat find no head, read
// the namespace again, and answer ENOENT; nothing makes the file again.
func TestMultiReapedFileStaysGone(t *testing.T) {
	v := newVolume(t)
	st := v.store()
	a := v.mount("ns_refresh=100ms")
	if err := os.WriteFile(a.path("x"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	id, prefix := fileOf(t, st)
	b := v.mount("ns_refresh=1m,ns_refresh_max=1m") // reads x at its start
	if got, err := os.ReadFile(b.path("x")); err != nil || string(got) != "data" {
		t.Fatalf("the other mount reads %q, %v", got, err)
	}

	if err := os.Remove(a.path("x")); err != nil {
		t.Fatal(err)
	}
	// The first run finds x orphaned; the second, past the grace and the
	// namespace lag (a clock two hours on), deletes it.
	if _, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Grace: time.Hour}); err != nil {
		t.Fatalf("cleaner: %v", err)
	}
	later := time.Now().Add(2 * time.Hour)
	rep, err := cleaner.CleanVolume(context.Background(), st, "", cleaner.Options{Grace: time.Hour, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatalf("cleaner: %v", err)
	}
	if len(rep.Orphans) != 1 {
		t.Fatalf("the cleaner deleted %d orphans, want 1 (x)", len(rep.Orphans))
	}

	if f, err := os.Open(b.path("x")); !errors.Is(err, os.ErrNotExist) {
		if err == nil {
			got, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("open of the deleted file on the lagging mount succeeded, reading %q; want ENOENT", got)
		} else {
			t.Errorf("open of the deleted file on the lagging mount: %v, want ENOENT", err)
		}
	}
	if f, err := os.OpenFile(b.path("x"), os.O_WRONLY|os.O_APPEND, 0); err == nil {
		_, werr := f.Write([]byte("ghost"))
		serr := f.Sync()
		f.Close()
		t.Errorf("open for writing of the deleted file succeeded (write %v, fsync %v); want ENOENT", werr, serr)
	}
	if _, err := os.Stat(b.path("x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat of the deleted file on the lagging mount: %v, want ENOENT", err)
	}
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "x" {
			t.Errorf("the lagging mount still lists x")
		}
	}
	if _, err := st.Head(context.Background(), prefix+"inode"); !errors.Is(err, staging.ErrNotFound) {
		t.Errorf("head of the deleted file %s: %v, want none (it was made again)", id, err)
	}
	if objs, err := staging.ListAll(context.Background(), st, prefix); err != nil || len(objs) != 0 {
		t.Errorf("objects of the deleted file %s: %d, %v; want none", id, len(objs), err)
	}
}
