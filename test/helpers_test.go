// Package test holds the end-to-end tests of ckptfs: a real FUSE mount over a
// real S3 server on loopback (staging/s3test), driven by unmodified programs.
package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/fs/inspect"
	"github.com/ckptfs/ckptfs/fs/namespace"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) {
	if err := parseTestNamespace(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s3test.Main(m)
}

// testNamespace is CKPTFS_TEST_NAMESPACE, the namespace format of every
// volume the tests make (docs/namespace-v2.md §10, step 3): "v1" (the
// default) or "v2". A test of what only one format has makes its volume
// with that format's option, whatever this says.
var testNamespace = "v1"

// parseTestNamespace reads CKPTFS_TEST_NAMESPACE into testNamespace; any
// other value than v1 or v2 stops the run before a test starts, so that a
// misspelt one never passes as a run on v1.
func parseTestNamespace() error {
	switch s := os.Getenv("CKPTFS_TEST_NAMESPACE"); s {
	case "", "v1":
		testNamespace = "v1"
	case "v2":
		testNamespace = "v2"
	default:
		return fmt.Errorf("CKPTFS_TEST_NAMESPACE=%q: want v1 (the default) or v2", s)
	}
	return nil
}

// withNamespace is mount options opts that make a volume (their "create")
// of testNamespace's format: with namespace=v2 added on v2, unless they
// name a namespace of their own. On v1 they are opts unchanged.
func withNamespace(opts string) string {
	if testNamespace == "v1" {
		return opts
	}
	create := false
	for item := range strings.SplitSeq(opts, ",") {
		item = strings.TrimSpace(item)
		if strings.HasPrefix(item, "namespace=") {
			return opts
		}
		create = create || item == "create"
	}
	if !create {
		return opts
	}
	// Before create, which tests that format the volume take off the end.
	if opts == "create" || strings.HasSuffix(opts, ",create") {
		return strings.TrimSuffix(opts, "create") + "namespace=" + testNamespace + ",create"
	}
	return opts + ",namespace=" + testNamespace
}

// formatNamespace is the -o of a ckptfs format, opts, that makes a volume
// of testNamespace's format: with namespace=v2 added on v2, unless opts name
// a namespace of their own.
func formatNamespace(opts string) string {
	if testNamespace == "v1" || strings.Contains(","+opts, ",namespace=") {
		return opts
	}
	return opts + ",namespace=" + testNamespace
}

// onV2 is whether the tests make namespace v2 volumes.
func onV2() bool { return testNamespace == "v2" }

// skipOnV2 skips a test on namespace v2 for a feature v2 lacks yet.
func skipOnV2(t testing.TB, feature string) {
	t.Helper()
	if onV2() {
		t.Skipf("namespace v2: %s not built yet (docs/namespace-v2.md §10)", feature)
	}
}

// volume is a folder of the test bucket that holds one ckptfs volume, and
// mounts of it.
type volume struct {
	t   *testing.T
	cfg s3.Config
}

func newVolume(t *testing.T) *volume {
	t.Helper()
	return &volume{t: t, cfg: s3test.Config(t)}
}

// store opens the volume's folder as a store, for looking at objects.
func (v *volume) store() staging.Store {
	v.t.Helper()
	s, err := s3.New(context.Background(), v.cfg)
	if err != nil {
		v.t.Fatal(err)
	}
	return s
}

// mount is one in-process mount of a volume.
type mount struct {
	t    *testing.T
	dir  string
	fsys *fusefs.FS
	done bool
}

// mount mounts the volume under t.TempDir() in this process with the mount
// defaults and opts; t.Cleanup unmounts it.
func (v *volume) mount(opts string) *mount {
	v.t.Helper()
	start := time.Now()
	defer func() { v.t.Logf("mount: %v", time.Since(start)) }()
	return v.mountWrapped(opts, func(st staging.Store) staging.Store { return st })
}

// mountWrapped is mount with the mount's store wrapped by wrap.
func (v *volume) mountWrapped(opts string, wrap func(staging.Store) staging.Store) *mount {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s3, err := s3.New(ctx, v.cfg)
	if err != nil {
		v.t.Fatal(err)
	}
	return mountStore(v.t, wrap(s3), opts)
}

// mountStore mounts st under t.TempDir() in this process with the mount
// defaults and opts, like volume.mount but on any store; t.Cleanup unmounts
// it.
func mountStore(t *testing.T, st staging.Store, opts string) *mount {
	t.Helper()
	// A mount in this process makes the volume when it is absent, with or
	// without create: of testNamespace's format, unless opts name one (the
	// last namespace= wins).
	if onV2() {
		opts = strings.TrimSuffix("namespace=v2,"+opts, ",")
	}
	cfg, err := config.ParseMount(config.TotalRAM(), opts)
	if err != nil {
		t.Fatalf("options %q: %v", opts, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	fsys, err := fusefs.New(ctx, st, fusefs.Options{Config: cfg, Logger: log, FsName: "ckptfs-test"})
	if err != nil {
		t.Fatalf("open volume: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Mount(dir); err != nil {
		fsys.Close()
		t.Fatalf("mount: %v", err)
	}
	m := &mount{t: t, dir: dir, fsys: fsys}
	t.Cleanup(func() { m.unmount() })
	return m
}

// unmount unmounts and flushes; it fails the test if that fails.
func (m *mount) unmount() {
	m.t.Helper()
	if m.done {
		return
	}
	m.done = true
	start := time.Now()
	defer func() { m.t.Logf("unmount: %v", time.Since(start)) }()
	if err := m.fsys.Unmount(); err != nil {
		m.t.Errorf("unmount %s: %v", m.dir, err)
	}
}

func (m *mount) path(name string) string { return filepath.Join(m.dir, name) }

// run runs a program and fails the test with its output if it fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := runErr(dir, name, args...)
	t.Logf("%s %s: %v", name, strings.Join(args, " "), time.Since(start))
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// runErr runs a program in dir and returns its output. The directory is
// entered by sh after the exec, not by the child between fork and exec: that
// child shares this process's memory until it execs, and when the directory
// is on a mount this process serves, a garbage collection that starts
// meanwhile waits for the forking thread while the child waits for the
// server's answer (a lookup, a getattr, and since the mount enforces ACLs
// the getxattr of the directory's ACL): a deadlock.
func runErr(dir, name string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-c", `cd "$0" && exec "$@"`, dir, name}, args...)
		name = "sh"
	}
	cmd := exec.Command(name, args...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// need fails the test when a program it drives is missing (CI installs
// them).
func need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is needed by this test: %v", p, err)
		}
	}
}

// size picks n normally and small with -short.
func size(n, short int64) int64 {
	if testing.Short() {
		return short
	}
	return n
}

var binary struct {
	once sync.Once
	path string
	err  error
	out  string
}

// ckptfsBinary builds cmd/ckptfs once per test binary.
func ckptfsBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		// A fixed folder, so that runs reuse it instead of leaving copies;
		// one per source tree, so that two checkouts tested at once never
		// run each other's binary.
		_, file, _, _ := runtime.Caller(0)
		sum := sha256.Sum256([]byte(filepath.Dir(file)))
		dir := filepath.Join(os.TempDir(), "ckptfs-e2e-bin-"+hex.EncodeToString(sum[:4]))
		if binary.err = os.MkdirAll(dir, 0o755); binary.err != nil {
			return
		}
		binary.path = filepath.Join(dir, "ckptfs")
		binary.out, binary.err = runErr(filepath.Dir(file), "go", "build", "-o", binary.path, "github.com/ckptfs/ckptfs/cmd/ckptfs")
	})
	if binary.err != nil {
		t.Fatalf("build ckptfs: %v\n%s", binary.err, binary.out)
	}
	return binary.path
}

// randomFile writes n random bytes (no holes, incompressible) to path. It
// uses a seeded ChaCha8 stream: /dev/urandom runs at tens of MB/s on a busy
// machine, and a GiB of it would dominate the test.
func randomFile(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var seed [32]byte
	copy(seed[:], path)
	r := rand.NewChaCha8(seed)
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(int64(len(buf)), n)
		_, _ = r.Read(buf[:k]) // ChaCha8.Read never fails
		if _, err := f.Write(buf[:k]); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// countObjects counts the objects under prefix of a volume.
func countObjects(t *testing.T, st staging.Store, prefix string) int {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

// asNobody runs a program as user nobody, group nogroup and no other group
// (setpriv, util-linux), for a mount made with allow_other; it returns the
// program's output and error.
func asNobody(dir, name string, args ...string) (string, error) {
	return runErr(dir, "setpriv", append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", name}, args...)...)
}

// openToOthers lets other users reach the mount point of m: t.TempDir makes
// its folders 0700.
func openToOthers(t *testing.T, m *mount) {
	t.Helper()
	for d := filepath.Dir(m.dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(d) == filepath.Clean(os.TempDir()) {
			break
		}
	}
}

// cleanLater runs the cleaner twice, keeping one checkpoint, the second run
// as if every grace period had passed since the first (a clock two days on),
// and returns the number of orphans the runs deleted and of those the last
// kept whole for a copy by reference.
func cleanLater(t *testing.T, st staging.Store) (deleted, referenced int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	later := time.Now().Add(48 * time.Hour)
	for _, now := range []time.Time{time.Now(), later} {
		rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatalf("cleaner: %v", err)
		}
		deleted += len(rep.Orphans)
		referenced = len(rep.Referenced)
	}
	return deleted, referenced
}

// openNames opens the namespace of the volume of st afresh, of whichever
// format it is; the caller closes it.
func openNames(t *testing.T, st staging.Store) namespace.Names {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := ckvolume.ReadDescriptor(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := ckvolume.OpenNames(ctx, st, "", d, ckvolume.NamesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// fsckClean fails the test unless fsck finds no problem in the volume.
func fsckClean(t *testing.T, st staging.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	iv, err := inspect.Open(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := iv.Fsck(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("fsck: %+v", r.Problems)
	}
}
