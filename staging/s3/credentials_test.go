package s3_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging/s3"
)

// credsFile writes text to a file of mode perm and returns its path.
func credsFile(t *testing.T, text string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, []byte(text), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return p
}

// TestCredentialsFile: a credentials file in AWS's format (a section per
// profile) or s3fs's (ACCESS:SECRET, or BUCKET:ACCESS:SECRET for one
// bucket, which wins) gives the keys.
func TestCredentialsFile(t *testing.T) {
	const aws = "# keys\n[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n\n" +
		"[ci]\naws_access_key_id=AKCI\naws_secret_access_key=sci\naws_session_token=tci\n"
	for _, tc := range []struct {
		name, text, profile, bucket string
		access, secret, token       string
	}{
		{"aws default", aws, "", "b", "AKDEF", "sdef", ""},
		{"aws profile", aws, "ci", "b", "AKCI", "sci", "tci"},
		{"passwd", "AKP:sp\n", "", "b", "AKP", "sp", ""},
		{"passwd comments and blanks", "# mine\n\n  AKP:sp  \n", "", "b", "AKP", "sp", ""},
		{"passwd bucket line wins", "AKP:sp\nother:AKO:so\nb:AKB:sb\n", "", "b", "AKB", "sb", ""},
		{"passwd other bucket", "other:AKO:so\nAKP:sp\n", "", "b", "AKP", "sp", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := credsFile(t, tc.text, 0o600)
			a, s, tok, err := s3.ReadCredentialsFile(p, tc.profile, tc.bucket)
			if err != nil || a != tc.access || s != tc.secret || tok != tc.token {
				t.Fatalf("got %q %q %q, %v; want %q %q %q", a, s, tok, err, tc.access, tc.secret, tc.token)
			}
		})
	}
}

// TestCredentialsFileRefused: a credentials file that is missing, open to
// group or others (as s3fs refuses it), not a file or malformed is refused
// in one line that names the file and says what to do, and never quotes
// the file.
func TestCredentialsFileRefused(t *testing.T) {
	const secret = "SECRETsecret"
	for _, tc := range []struct {
		name, text string
		perm       os.FileMode
		profile    string
		want       []string // in the message, besides the path
	}{
		{"missing", "", 0, "", []string{"no such file", "create it", "mode 600"}},
		{"readable by others", "AK:" + secret + "\n", 0o604, "", []string{"open to group or others (mode 0604)", "chmod 600 "}},
		{"readable by group", "AK:" + secret + "\n", 0o640, "", []string{"(mode 0640)", "chmod 600 "}},
		{"writable by group", "AK:" + secret + "\n", 0o620, "", []string{"(mode 0620)", "chmod 600 "}},
		{"passwd line", "AK:" + secret + "\nAK " + secret + "\n", 0o600, "", []string{"line 2 is not ACCESS_KEY:SECRET_KEY", "write it as"}},
		{"passwd empty key", ":" + secret + "\n", 0o600, "", []string{"line 1 is not"}},
		{"passwd four fields", "a:b:c:" + secret + "\n", 0o600, "", []string{"line 1 is not"}},
		{"passwd other bucket only", "other:AK:" + secret + "\n", 0o600, "", []string{"no keys for bucket b", "b:ACCESS_KEY:SECRET_KEY"}},
		{"empty", "\n# nothing\n", 0o600, "", []string{"no keys for bucket b"}},
		{"passwd with profile", "AK:" + secret + "\n", 0o600, "ci", []string{"profile= names a section", "drop profile="}},
		{"aws no section", "[default]\naws_access_key_id = AK\naws_secret_access_key = " + secret + "\n", 0o600, "ci", []string{"no [ci] section", "profile="}},
		{"aws no secret", "[default]\naws_access_key_id = AK\n", 0o600, "", []string{"section [default] lacks", "give both"}},
		{"aws garbage", "[default]\nthis is " + secret + "\n", 0o600, "", []string{"section [default] lacks"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "creds")
			if tc.perm != 0 {
				p = credsFile(t, tc.text, tc.perm)
			}
			_, _, _, err := s3.ReadCredentialsFile(p, tc.profile, "b")
			if err == nil {
				t.Fatal("read; want a refusal")
			}
			msg := err.Error()
			if !errors.Is(err, s3.ErrCredentialsFile) {
				t.Errorf("%q: not ErrCredentialsFile", msg)
			}
			if !strings.HasPrefix(msg, "credentials file "+p+": ") || strings.Contains(msg, "\n") || strings.Contains(msg, secret) {
				t.Errorf("%q: want one line naming %s first, without the secret", msg, p)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q: want %q in it", msg, w)
				}
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if _, _, _, err := s3.ReadCredentialsFile(dir, "", "b"); err == nil || !strings.Contains(err.Error(), "credentials file "+dir+": not a regular file") {
			t.Fatalf("%v; want not a regular file", err)
		}
	})
}

// TestS3CredentialsFileWins: a store given a credentials file signs with
// its keys, not the environment's, and a missing profile is said with the
// files looked in and what to do.
func TestS3CredentialsFileWins(t *testing.T) {
	fakeIMDS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "senv")
	fake, _ := newFakeS3(t)
	var mu sync.Mutex
	var auth []string
	fake.mu.Lock()
	fake.serve = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		http.NotFound(w, r)
	}
	fake.mu.Unlock()
	for _, tc := range []struct{ name, text, profile, key string }{
		{"passwd", "AKFILE:sfile\n", "", "AKFILE"},
		{"aws profile", "[default]\naws_access_key_id=AKDEF\naws_secret_access_key=s\n[ci]\naws_access_key_id=AKCI\naws_secret_access_key=s\n", "ci", "AKCI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			auth = nil
			mu.Unlock()
			p := credsFile(t, tc.text, 0o600)
			s := newS3(t, s3.Config{Bucket: "b", Endpoint: fake.url, PathStyle: true, CredentialsFile: p, Profile: tc.profile})
			s.Head(t.Context(), "k")
			mu.Lock()
			defer mu.Unlock()
			if len(auth) == 0 || !strings.Contains(auth[0], "Credential="+tc.key+"/") {
				t.Fatalf("signed with %q; want the file's key %s", auth, tc.key)
			}
		})
	}
	t.Run("no such profile", func(t *testing.T) {
		_, err := s3.New(t.Context(), s3.Config{Bucket: "b", Endpoint: fake.url, PathStyle: true, Profile: "nope"})
		want := `no profile "nope" in ` + os.Getenv("AWS_CONFIG_FILE") + " or " + os.Getenv("AWS_SHARED_CREDENTIALS_FILE") +
			": check profile= (or AWS_PROFILE), or add the profile (aws configure --profile nope)"
		if err == nil || err.Error() != want {
			t.Fatalf("%v; want %s", err, want)
		}
	})
	t.Run("keys and file", func(t *testing.T) {
		p := credsFile(t, "AK:s\n", 0o600)
		_, err := s3.New(t.Context(), s3.Config{Bucket: "b", Endpoint: fake.url, AccessKey: "a", SecretKey: "s", CredentialsFile: p})
		if err == nil || !strings.Contains(err.Error(), "not both") {
			t.Fatalf("%v; want a refusal of both", err)
		}
	})
}
