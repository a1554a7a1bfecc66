package test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// TestCheckpointsFollowPermissions: an old checkpoint is exactly as
// protected as its file, as of now: the file's owner, group and mode, and the
// search permission of every directory on its path. Another user can read
// neither the secret nor the names in a 0700 directory through .checkpoints.
func TestCheckpointsFollowPermissions(t *testing.T) {
	need(t, "setpriv", "cat", "ls")
	v := newVolume(t)
	m := v.mount("allow_other")
	openToOthers(t, m)
	write := func(p, s string, mode os.FileMode) string {
		t.Helper()
		if err := os.WriteFile(m.path(p), []byte(s), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(m.path(p), mode); err != nil {
			t.Fatal(err)
		}
		return getxattr(t, m.path(p), "user.ckptfs.cno")
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"private", 0o700}, {"public", 0o755}} {
		if err := os.Mkdir(m.path(d.name), d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(m.path(d.name), d.mode); err != nil {
			t.Fatal(err)
		}
	}
	secret := write("private/secret.txt", "the secret", 0o600)
	open := write("public/open.txt", "public words", 0o644)
	rootOnly := write("public/root-only.txt", "root's own", 0o600)
	theirs := write("public/theirs.txt", "nobody's own", 0o600)
	if err := os.Chown(m.path("public/theirs.txt"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ck := func(p, cno string) string { return m.path(".checkpoints/" + p + "/" + cno) }

	// The live files, as the kernel checks them.
	if out, err := asNobody(m.dir, "cat", m.path("private/secret.txt")); err == nil {
		t.Fatalf("nobody reads private/secret.txt: %q", out)
	}
	refused := func(what, prog string, args ...string) {
		t.Helper()
		out, err := asNobody(m.dir, prog, args...)
		if err == nil {
			t.Fatalf("%s: nobody's %s %s succeeded: %q", what, prog, strings.Join(args, " "), out)
		}
		if strings.Contains(out, "the secret") || strings.Contains(out, "root's own") {
			t.Fatalf("%s: nobody's %s printed %q", what, prog, out)
		}
	}
	allowed := func(want, prog string, args ...string) {
		t.Helper()
		out, err := asNobody(m.dir, prog, args...)
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("nobody's %s %s: %q, %v; want %q", prog, strings.Join(args, " "), out, err, want)
		}
	}
	refused("checkpoint in a 0700 directory", "cat", ck("private/secret.txt", secret))
	refused("names in a 0700 directory", "ls", m.path(".checkpoints/private"))
	refused("checkpoints of a file in a 0700 directory", "ls", m.path(".checkpoints/private/secret.txt"))
	refused("checkpoint of a 0600 file of root's", "cat", ck("public/root-only.txt", rootOnly))
	refused("checkpoints of a 0600 file of root's", "ls", m.path(".checkpoints/public/root-only.txt"))
	allowed("public words", "cat", ck("public/open.txt", open))
	allowed("nobody's own", "cat", ck("public/theirs.txt", theirs))
	allowed("open.txt", "ls", m.path(".checkpoints/public"))
	if err := os.WriteFile(ck("public/theirs.txt", theirs), []byte("x"), 0o644); err == nil {
		t.Fatal("an old checkpoint was written")
	}

	// As of now: opening the directory and the file opens their
	// checkpoints, closing them closes them (within the attribute timeout).
	if err := os.Chmod(m.path("private"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("private/secret.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		out, err := asNobody(m.dir, "cat", ck("private/secret.txt", secret))
		if err != nil || out != "the secret" {
			return fmt.Errorf("after chmod a+r: %q, %v", out, err)
		}
		return nil
	})
	if err := os.Chmod(m.path("private"), 0o700); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		if out, err := asNobody(m.dir, "cat", ck("private/secret.txt", secret)); err == nil {
			return fmt.Errorf("after chmod 0700 of the directory: read %q", out)
		}
		return nil
	})
}

// TestCheckpointsNameReserved: no entry named .checkpoints can be made at the
// root (it would be hidden behind the tree of old checkpoints); elsewhere
// the name is an ordinary one.
func TestCheckpointsNameReserved(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	if err := os.WriteFile(m.path("f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	name := m.path(".checkpoints")
	// syscall.Rename: os.Rename refuses an existing directory as target
	// itself, without asking the filesystem.
	if err := syscall.Rename(m.path("d"), name); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rename of a directory to .checkpoints: %v, want EPERM", err)
	}
	for what, err := range map[string]error{
		"mkdir":         os.Mkdir(name, 0o755),
		"create":        os.WriteFile(name, []byte("x"), 0o644),
		"link":          os.Link(m.path("f"), name),
		"symlink":       os.Symlink("f", name),
		"rename a file": syscall.Rename(m.path("f"), name),
	} {
		if err == nil {
			t.Errorf("%s .checkpoints at the root succeeded", what)
		}
	}
	if _, err := m.fsys.Namespace().Lookup(t.Context(), namespace.RootIno, ".checkpoints"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("the namespace has a .checkpoints at the root: %v", err)
	}
	// The tree of old checkpoints is still there, and d and f are where they were.
	if _, err := os.ReadDir(m.path(".checkpoints/d")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "data" {
		t.Fatalf("f: %q, %v", b, err)
	}
	// Below the root it is an ordinary name.
	if err := os.Mkdir(m.path("d/.checkpoints"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.path("f"), m.path("d/.checkpoints/f")); err != nil {
		t.Fatal(err)
	}
}

// TestVirtualXattrsNotListed: user.ckptfs.cno and user.ckptfs.format are read
// by name but not listed, so that cp -a, rsync -X and tar --xattrs do not
// copy them onto other files.
func TestVirtualXattrsNotListed(t *testing.T) {
	v := newVolume(t)
	m := v.mount("")
	p := m.path("doc")
	if err := os.WriteFile(p, []byte("text"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(p, "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := syscall.Listxattr(p, buf)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
	if !slices.Equal(names, []string{"user.color"}) {
		t.Fatalf("listxattr: %q, want only user.color", names)
	}
	if c := getxattr(t, p, "user.ckptfs.cno"); c == "" || c == "0" {
		t.Fatalf("user.ckptfs.cno by name: %q", c)
	}
	if f := getxattr(t, p, "user.ckptfs.format"); f == "" {
		t.Fatal("user.ckptfs.format by name is empty")
	}
	// A file with no stored attribute lists none.
	if err := os.WriteFile(m.path("plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := syscall.Listxattr(m.path("plain"), buf); err != nil || n != 0 {
		t.Fatalf("listxattr of a plain file: %q, %v", buf[:n], err)
	}
}
