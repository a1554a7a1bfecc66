package test

import (
	"os"
	"strings"
	"testing"
)

// TestPOSIXACL: setfacl and getfacl work as on a local filesystem, the kernel
// enforces what they set (a user the mode refuses reads through a named
// entry, and is refused again once it is removed), a directory's default ACL
// is inherited by the files and directories created in it (the umask
// ignored there, as POSIX says, and applied elsewhere), a chmod narrows
// the mask, setting an ACL clears setgid as on ext4, old checkpoints carry
// the file's ACL without write, and all of it survives a remount.
func TestPOSIXACL(t *testing.T) {
	need(t, "setfacl", "getfacl", "setpriv", "cat", "chmod")
	v := newVolume(t)
	m := v.mount("allow_other")
	openToOthers(t, m)
	acl := func(m *mount, p string) string {
		t.Helper()
		return run(t, m.dir, "getfacl", "-c", "-E", m.path(p))
	}
	has := func(what, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w+"\n") {
				t.Fatalf("%s: getfacl shows\n%s\nwant the entry %q", what, got, w)
			}
		}
	}
	lacks := func(what, got string, not ...string) {
		t.Helper()
		for _, w := range not {
			if strings.Contains(got, w+"\n") {
				t.Fatalf("%s: getfacl shows\n%s\nwant no entry %q", what, got, w)
			}
		}
	}
	reads := func(what, p, want string) {
		t.Helper()
		out, err := asNobody(m.dir, "cat", p)
		if err != nil || out != want {
			t.Fatalf("%s: nobody's cat %s: %q, %v; want %q", what, p, out, err, want)
		}
	}
	refused := func(what, p string) {
		t.Helper()
		if out, err := asNobody(m.dir, "cat", p); err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("%s: nobody's cat %s: %q, %v; want Permission denied", what, p, out, err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(m.path(p), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(m.path(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A named user entry, granted and taken back.
	write("f", "for nobody")
	refused("mode 0600", m.path("f"))
	run(t, m.dir, "setfacl", "-m", "u:nobody:r", m.path("f"))
	has("after setfacl -m", acl(m, "f"), "user:nobody:r--", "mask::r--", "group::---", "other::---")
	if fi, err := os.Stat(m.path("f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode after setfacl -m: %v %v, want 0640 (the mask in the group bits)", fi.Mode(), err)
	}
	reads("named entry", m.path("f"), "for nobody")
	run(t, m.dir, "setfacl", "-x", "u:nobody", m.path("f"))
	lacks("after setfacl -x", acl(m, "f"), "user:nobody:r--")
	refused("entry removed", m.path("f"))

	// chmod narrows the mask as on ext4; the entry stays, without effect.
	write("g", "chmod")
	run(t, m.dir, "setfacl", "-m", "u:nobody:rw", m.path("g"))
	reads("before chmod", m.path("g"), "chmod")
	run(t, m.dir, "chmod", "600", m.path("g"))
	has("after chmod 600", acl(m, "g"), "user:nobody:rw-", "mask::---")
	refused("mask cleared by chmod", m.path("g"))
	run(t, m.dir, "chmod", "640", m.path("g"))
	has("after chmod 640", acl(m, "g"), "user:nobody:rw-", "mask::r--")
	reads("mask r by chmod", m.path("g"), "chmod")

	// Setting an ACL clears setgid when its owner is not in its group, and
	// keeps it for root.
	write("sg", "setgid")
	if err := os.Chown(m.path("sg"), 65534, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("sg"), 0o644|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	run(t, m.dir, "setfacl", "-m", "u:daemon:r", m.path("sg"))
	if fi, err := os.Stat(m.path("sg")); err != nil || fi.Mode()&os.ModeSetgid == 0 {
		t.Fatalf("root's setfacl on a setgid file: mode %v %v, want setgid kept", fi.Mode(), err)
	}
	if out, err := asNobody(m.dir, "setfacl", "-m", "u:daemon:rw", m.path("sg")); err != nil {
		t.Fatalf("the owner's setfacl: %v\n%s", err, out)
	}
	if fi, err := os.Stat(m.path("sg")); err != nil || fi.Mode()&os.ModeSetgid != 0 || fi.Mode().Perm() != 0o664 {
		t.Fatalf("setfacl by an owner outside the group: mode %v %v, want 0664 without setgid", fi.Mode(), err)
	}

	// A default ACL, inherited by a file and a directory created under it.
	if err := os.Mkdir(m.path("d"), 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, m.dir, "setfacl", "-m", "u:nobody:rx", "-d", "-m", "u:nobody:r", m.path("d"))
	if err := os.WriteFile(m.path("d/new"), []byte("inherited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	inherited := func(m *mount) {
		t.Helper()
		has("new file under a default ACL", acl(m, "d/new"), "user:nobody:r--")
		sub := acl(m, "d/sub")
		has("new directory under a default ACL", sub, "user:nobody:r--", "default:user:nobody:r--")
		if strings.Count(sub, "default:") < 4 {
			t.Fatalf("new directory: getfacl shows\n%s\nwant the whole default ACL", sub)
		}
	}
	inherited(m)
	reads("inherited entry", m.path("d/new"), "inherited")
	// The umask applies where there is no default ACL, and only there.
	run(t, m.dir, "sh", "-c", "umask 077; echo masked > d/masked; echo plain > plain; mkdir plaindir; mkfifo fifo d/fifo")
	reads("created with umask 077 under a default ACL", m.path("d/masked"), "masked\n")
	for p, want := range map[string]os.FileMode{"d/masked": 0o640, "plain": 0o600, "plaindir": 0o700, "fifo": 0o600, "d/fifo": 0o640} {
		if fi, err := os.Stat(m.path(p)); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s created with umask 077: mode %v %v, want %v", p, fi.Mode(), err, want)
		}
	}

	// Old checkpoints: the file's ACL, read-only.
	cno := getxattr(t, m.path("d/new"), "user.ckptfs.cno")
	ck := ".checkpoints/d/new/" + cno
	has("a checkpoint", acl(m, ck), "user:nobody:r--")
	reads("a checkpoint through its ACL", m.path(ck), "inherited")
	run(t, m.dir, "setfacl", "-m", "u:nobody:rw", m.path("f"))
	fck := ".checkpoints/f/" + getxattr(t, m.path("f"), "user.ckptfs.cno")
	if got := acl(m, fck); !strings.Contains(got, "user:nobody:r--\n") || strings.Contains(got, "w") {
		t.Fatalf("a checkpoint of a file nobody may write: getfacl shows\n%s\nwant user:nobody:r-- and no w", got)
	}
	m.unmount()

	// After a remount.
	m = v.mount("allow_other")
	openToOthers(t, m)
	inherited(m)
	has("f after a remount", acl(m, "f"), "user:nobody:rw-", "mask::rw-")
	reads("f after a remount", m.path("f"), "for nobody")
	has("g after a remount", acl(m, "g"), "user:nobody:rw-", "mask::r--")
	reads("inherited entry after a remount", m.path("d/new"), "inherited")
	run(t, m.dir, "setfacl", "-x", "u:nobody", m.path("f"))
	refused("entry removed after a remount", m.path("f"))
}
