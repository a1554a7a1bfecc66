package test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// statUGA is stat -c %u:%g:%a of each path, one per line.
func statUGA(t *testing.T, paths ...string) []string {
	t.Helper()
	out := run(t, "", "stat", append([]string{"-c", "%u:%g:%a"}, paths...)...)
	return strings.Fields(out)
}

// TestMountOptsOwnership: uid, gid, file_mode, dir_mode and umask override
// what stat shows for every file and directory, new ones included, while the
// namespace keeps each one's own owner and mode (a mount without the options
// shows them); and the kernel checks permissions against what is shown.
func TestMountOptsOwnership(t *testing.T) {
	need(t, "stat", "setpriv", "cat")
	v := newVolume(t)
	plain := v.mount("")
	if err := os.Mkdir(plain.path("d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain.path("d/f"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(plain.path("d/f"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	plain.unmount()

	tests := []struct {
		opts string
		want []string // d, d/f, d/new (created through this mount by root, 0600)
	}{
		{"", []string{"0:0:700", "1000:1000:600", "0:0:600"}},
		{"uid=65534,gid=65534", []string{"65534:65534:700", "65534:65534:600", "65534:65534:600"}},
		{"file_mode=0644,dir_mode=0755", []string{"0:0:755", "1000:1000:644", "0:0:644"}},
		{"file_mode=0666,dir_mode=0777,umask=027", []string{"0:0:750", "1000:1000:640", "0:0:640"}},
		{"umask=077", []string{"0:0:700", "1000:1000:600", "0:0:600"}},
	}
	for i, tt := range tests {
		t.Run(tt.opts, func(t *testing.T) {
			m := v.mount(tt.opts)
			newName := m.path("d/new" + string(rune('a'+i)))
			if err := os.WriteFile(newName, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			got := statUGA(t, m.path("d"), m.path("d/f"), newName)
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("stat -c %%u:%%g:%%a d d/f d/new = %v, want %v", got, tt.want)
			}
			m.unmount()
			// What was recorded is unchanged: the plain mount shows it.
			p := v.mount("")
			if got := statUGA(t, p.path("d"), p.path("d/f"), p.path("d/"+filepath.Base(newName))); strings.Join(got, " ") != "0:0:700 1000:1000:600 0:0:600" {
				t.Fatalf("plain mount after -o %s shows %v", tt.opts, got)
			}
			p.unmount()
		})
	}

	// The kernel checks what is shown: a 0700 directory of root's and a 0600
	// file of uid 1000 are closed to nobody, until uid=65534 makes nobody
	// their owner.
	for _, tt := range []struct {
		opts  string
		reads bool
	}{{"allow_other", false}, {"allow_other,uid=65534,gid=65534", true}} {
		m := v.mount(tt.opts)
		openToOthers(t, m)
		out, err := asNobody(m.dir, "cat", m.path("d/f"))
		if reads := err == nil && out == "secret"; reads != tt.reads {
			t.Errorf("-o %s: nobody cat d/f = %q, %v; want readable %v", tt.opts, out, err, tt.reads)
		}
		m.unmount()
	}
}

// TestMountOptsNoexec: with noexec the kernel refuses to run a program of the
// mount (EACCES), exec bit or not; without, the same script runs. The mount
// is served by the binary, not by this process: a process that execs a file
// of a mount it serves itself can deadlock in the kernel (the exec reads the
// file while the mm it shares with its vfork parent is locked, and the
// threads that would answer the read fault on that mm).
func TestMountOptsNoexec(t *testing.T) {
	store := "file://" + t.TempDir()
	for _, tt := range []struct {
		opts string
		runs bool
	}{{"", true}, {"noexec", false}, {"noexec,exec", true}} {
		t.Run(tt.opts, func(t *testing.T) {
			dir := mountpoint(t)
			startForeground(t, store, dir, "create,"+tt.opts)
			t.Cleanup(func() { runErr("", "fusermount3", "-u", dir) })
			script := filepath.Join(dir, "hello.sh")
			if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(script, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(script).CombinedOutput()
			switch {
			case tt.runs && (err != nil || string(out) != "hello\n"):
				t.Fatalf("%s: %q, %v; want hello", script, out, err)
			case !tt.runs && !errors.Is(err, syscall.EACCES):
				t.Fatalf("%s under noexec: %q, %v; want EACCES", script, out, err)
			}
			if !tt.runs {
				// Reading it is still allowed: sh runs it from its text.
				if out := run(t, "", "sh", script); out != "hello\n" {
					t.Fatalf("sh %s: %q", script, out)
				}
			}
		})
	}
}

// TestMountOptsAllowRoot: with allow_root another user is refused (EACCES)
// even where the modes let everyone in, while root and the mounting user
// (here root too) get in; allow_other lets the same user in.
func TestMountOptsAllowRoot(t *testing.T) {
	need(t, "setpriv", "ls", "cat")
	skipOnV2(t, "the root's attributes (chmod of the mount's root)")
	v := newVolume(t)
	for _, tt := range []struct {
		opts   string
		others bool
	}{{"allow_other", true}, {"allow_root", false}} {
		t.Run(tt.opts, func(t *testing.T) {
			m := v.mount(tt.opts)
			openToOthers(t, m)
			if err := os.WriteFile(m.path("open.txt"), []byte("open"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(m.path("open.txt"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(m.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if out := run(t, "", "cat", m.path("open.txt")); out != "open" {
				t.Fatalf("root reads %q", out)
			}
			for _, args := range [][]string{{"ls", m.dir}, {"cat", m.path("open.txt")}, {"stat", m.path("open.txt")}} {
				out, err := asNobody("", args[0], args[1:]...)
				if (err == nil) != tt.others {
					t.Errorf("-o %s: nobody %s: %q, %v; want allowed %v", tt.opts, strings.Join(args, " "), out, err, tt.others)
				}
				if !tt.others && !strings.Contains(out, "Permission denied") {
					t.Errorf("-o %s: nobody %s: %q, want Permission denied", tt.opts, strings.Join(args, " "), out)
				}
			}
		})
	}
}
