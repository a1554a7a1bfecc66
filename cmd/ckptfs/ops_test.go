package main

import (
	"context"
	"errors"
	"net"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func TestVersion(t *testing.T) {
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.24", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			"ckptfs v1.2.3 commit abc123 go1.24"},
		{"modified tree", debug.BuildInfo{GoVersion: "go1.24", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			"ckptfs (devel) commit abc123-modified go1.24"},
		{"nothing known", debug.BuildInfo{GoVersion: "go1.24"}, "ckptfs (devel) commit (devel) go1.24"},
	}
	for _, c := range cases {
		if got := versionOf(&c.bi); got != c.want {
			t.Errorf("%s: versionOf = %q, want %q", c.name, got, c.want)
		}
	}
	for _, args := range [][]string{{"ckptfs", "--version"}, {"ckptfs", "-V"}, {"ckptfs", "version"}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, errOut.String())
		}
		if got := out.String(); got != version()+"\n" || !strings.HasPrefix(got, "ckptfs ") || strings.Count(got, "\n") != 1 {
			t.Errorf("%q printed %q, want the one line %q", args, got, version())
		}
	}
	var out, errOut strings.Builder
	run([]string{"ckptfs", "--help"}, &out, &errOut)
	if !strings.HasPrefix(out.String(), version()+"\n") {
		t.Errorf("--help does not start with the version")
	}
}

func TestTakeStoreOptsOps(t *testing.T) {
	so, rest, err := takeStoreOpts([]string{"create", "single_writer=yes", "mount_timeout=5s", "rw"})
	if err != nil || !so.create || !so.singleWriter || so.startBound() != 5*time.Second || len(rest) != 1 {
		t.Fatalf("takeStoreOpts = %+v, %q, %v", so, rest, err)
	}
	if so, _, _ := takeStoreOpts(nil); so.startBound() != defaultMountTimeout || so.create {
		t.Errorf("defaults %+v", so)
	}
	for _, bad := range []string{"mount_timeout=soon", "mount_timeout=0s", "mount_timeout", "create=maybe"} {
		if _, _, err := takeStoreOpts([]string{bad}); err == nil {
			t.Errorf("takeStoreOpts(%s) accepted", bad)
		}
	}
}

// TestFormat: format creates the descriptor with the options' format and
// block sizes, a second format says "already a volume" and exits 1, and a
// mount (without create) of a store without one fails with the line that
// says how to create it, writing nothing.
func TestFormat(t *testing.T) {
	root := t.TempDir()
	store := "file://" + root
	cfg := config.MountDefault(config.TotalRAM())

	fsys, err := openFS(store, storeOpts{}, cfg, nopLog(), func(string) {})
	if err == nil {
		fsys.Close()
		t.Fatal("a mount of an empty store succeeded without create")
	}
	want := `no ckptfs volume at ` + store + ` (no ` + store + `/ckptfs.json there); create one with "ckptfs format ` + store + `" or mount with -o create`
	if err.Error() != want || !errors.Is(err, volume.ErrNoVolume) {
		t.Fatalf("mount of an empty store: %q, want %q", err, want)
	}
	d, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	noVolume := func(who string) {
		t.Helper()
		if objs, err := staging.ListAll(context.Background(), d, ""); err != nil || len(objs) != 0 {
			t.Fatalf("%s wrote %d objects (%v)", who, len(objs), err)
		}
	}
	noVolume("the refused mount")
	for _, tool := range []string{"ls", "info", "fsck", "gc"} {
		var out, errOut strings.Builder
		if code := run([]string{"ckptfs", tool, store}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "no ckptfs volume at "+store+" (no "+store+"/ckptfs.json there)") {
			t.Errorf("ckptfs %s of an empty store: exit %d, %q", tool, code, errOut.String())
		}
	}
	noVolume("a tool")

	var out, errOut strings.Builder
	if code := run([]string{"ckptfs", "format", "-o", "format=parted,data_block_size=128K", store}, &out, &errOut); code != 0 {
		t.Fatalf("format exited %d: %s", code, errOut.String())
	}
	// The sizes as options write them, so that the line serves as -o.
	if want := "created volume " + store + ": format=parted data_block_size=128K meta_block_size=4K\n"; out.String() != want {
		t.Errorf("format printed %q, want %q", out.String(), want)
	}
	v, err := volume.ReadDescriptor(context.Background(), d, "")
	if err != nil || v.Format != "parted" || v.DataBlockSize != 128<<10 {
		t.Fatalf("descriptor after format: %+v (%v)", v, err)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"ckptfs", "format", store}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "already a volume") {
		t.Fatalf("second format: exit %d, %q", code, errOut.String())
	}
	if v2, err := volume.ReadDescriptor(context.Background(), d, ""); err != nil || v2 != v {
		t.Fatalf("the second format changed the descriptor: %+v (%v)", v2, err)
	}
	fsys, err = openFS(store, storeOpts{}, cfg, nopLog(), func(string) {})
	if err != nil {
		t.Fatalf("mount of a formatted store: %v", err)
	}
	fsys.Close()

	// create and mem:// need no format.
	for _, c := range []struct {
		store string
		so    storeOpts
	}{{"file://" + t.TempDir(), storeOpts{create: true}}, {"mem://", storeOpts{}}} {
		fsys, err := openFS(c.store, c.so, cfg, nopLog(), func(string) {})
		if err != nil {
			t.Fatalf("mount of %s with %+v: %v", c.store, c.so, err)
		}
		fsys.Close()
	}
}

// TestMountErrorsS3: a mount of a missing bucket, with a wrong secret key,
// or of an endpoint nobody listens on fails with one line naming the bucket
// and the endpoint; the last also says which bound it hit.
func TestMountErrorsS3(t *testing.T) {
	c := s3test.Config(t)
	if c.AccessKey == "" {
		t.Skip("the server's credentials come from the environment")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", c.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", c.SecretKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	cfg := config.MountDefault(config.TotalRAM())
	base := storeOpts{endpoint: c.Endpoint, region: c.Region, pathStyle: true, create: true}
	store := "s3://" + c.Bucket + "/" + strings.TrimSuffix(c.Prefix, "/")
	cases := []struct {
		name  string
		store string
		so    func(storeOpts) storeOpts
		env   func(*testing.T)
		want  string
		kind  error
	}{
		{"missing bucket", "s3://no-such-bucket-ckptfs/vol", func(so storeOpts) storeOpts { return so }, nil,
			`no bucket "no-such-bucket-ckptfs" at ` + c.Endpoint + `: check the bucket name in the store URL (and endpoint=)`, s3.ErrNoSuchBucket},
		{"bad secret", store, func(so storeOpts) storeOpts { return so },
			func(t *testing.T) { t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong"+c.SecretKey) },
			`the secret key does not match the access key: bucket "` + c.Bucket + `" at ` + c.Endpoint + ` refused the credentials: check the access key and secret key (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, credentials_file= or the profile)`, s3.ErrBadCredentials},
		{"closed port", store, func(so storeOpts) storeOpts { so.endpoint = closed; so.mountTimeout = 2 * time.Second; return so }, nil,
			`gave up after mount_timeout=2s reaching ` + closed + `: connection refused: cannot reach ` + closed + ` for bucket "` + c.Bucket + `": check endpoint= and that the server is up`, s3.ErrUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				tc.env(t)
			}
			fsys, err := openFS(tc.store, tc.so(base), cfg, nopLog(), func(string) {})
			if err == nil {
				fsys.Close()
				t.Fatal("mount succeeded")
			}
			if err.Error() != tc.want || !errors.Is(err, tc.kind) {
				t.Fatalf("mount failed with\n%q\nwant\n%q", err, tc.want)
			}
		})
	}
	// And the real thing mounts (create) and passes the conditional-write check.
	fsys, err := openFS(store, base, cfg, nopLog(), func(string) {})
	if err != nil {
		t.Fatalf("mount of the real bucket: %v", err)
	}
	fsys.Close()
}
