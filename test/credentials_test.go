package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestCredentialsFile: a mount with an empty environment (as mount(8) runs
// an fstab line at boot) reaches the bucket with the keys of
// credentials_file=, in AWS's format or s3fs's (passwd_file=), writes and
// reads; a credentials file the mount's user cannot read, or that others
// can, is refused in one line naming the file and the fix.
func TestCredentialsFile(t *testing.T) {
	need(t, "fusermount3", "setpriv")
	e, err := s3test.Shared()
	if err != nil {
		t.Fatal(err)
	}
	if e.AccessKey == "" {
		t.Skip("the bucket is reached with the environment's credentials, which no file here holds")
	}
	bin := ckptfsBinary(t)
	keys := func(text string, perm os.FileMode) string {
		p := filepath.Join(t.TempDir(), "keys")
		if err := os.WriteFile(p, []byte(text), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, option, text string }{
		{"aws format", "credentials_file", "[default]\naws_access_key_id = " + e.AccessKey + "\naws_secret_access_key = " + e.SecretKey + "\n"},
		{"s3fs format", "passwd_file", e.AccessKey + ":" + e.SecretKey + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVolume(t)
			store, opts, _ := s3Args(t, v)
			dir := mountpoint(t)
			log := filepath.Join(t.TempDir(), "log")
			cmd := exec.Command(bin, "mount", "-o", withNamespace(opts)+","+tc.option+"="+keys(tc.text, 0o600)+",log_file="+log, store, dir)
			cmd.Env = []string{} // nothing: no keys, no HOME, no PATH
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("mount with %s and an empty environment: %v\n%s", tc.option, err, out)
			}
			t.Cleanup(func() {
				if isMounted(t, dir) {
					runErr("", "fusermount3", "-u", dir)
				}
			})
			run(t, dir, "sh", "-c", "echo hello > greeting && sync greeting")
			run(t, "", "fusermount3", "-u", dir)
			m := v.mount("")
			if b, err := os.ReadFile(m.path("greeting")); err != nil || string(b) != "hello\n" {
				t.Fatalf("greeting through another mount: %q, %v", b, err)
			}
			if b, _ := os.ReadFile(log); strings.Contains(string(b), e.SecretKey) {
				t.Fatalf("the log holds the secret key:\n%s", b)
			}
		})
	}

	v := newVolume(t)
	store, opts, _ := s3Args(t, v)
	good := e.AccessKey + ":" + e.SecretKey + "\n"
	for _, tc := range []struct {
		name   string
		perm   os.FileMode
		nobody bool
		want   string
	}{
		{"readable by others", 0o644, false, ": open to group or others (mode 0644), and it holds secret keys: chmod 600 "},
		{"unreadable by the user", 0o600, true, ": not readable by uid "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := keys(good, tc.perm)
			args := []string{"ls", "-o", opts + ",credentials_file=" + p, store}
			var out string
			if tc.nobody {
				// nobody may reach the file's folder, not the file.
				if err := os.Chmod(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Dir(filepath.Dir(p)), 0o755); err != nil {
					t.Fatal(err)
				}
				out, err = asNobody("/", "env", append([]string{"-i", bin}, args...)...)
			} else {
				c := exec.Command(bin, args...)
				c.Env = []string{}
				var b []byte
				b, err = c.CombinedOutput()
				out = string(b)
			}
			want := "ckptfs ls: store " + store + ": credentials file " + p + tc.want
			if err == nil || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 || strings.Contains(out, e.SecretKey) {
				t.Fatalf("ls: %v, %q; want one line beginning %q", err, out, want)
			}
		})
	}
}
