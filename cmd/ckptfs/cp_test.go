package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// randBytes are n reproducible bytes that differ with seed.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6370))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// formatStore creates a volume in st (as ckptfs format does) and opens it.
func formatStore(t *testing.T, st staging.Store) *cpVolume {
	t.Helper()
	if _, err := volume.CreateDescriptor(context.Background(), st, "", config.MountDefault(config.TotalRAM())); err != nil {
		t.Fatal(err)
	}
	return reopen(t, st)
}

// reopen opens the volume of st afresh: a reader that knows only what the
// bucket holds.
func reopen(t *testing.T, st staging.Store) *cpVolume {
	t.Helper()
	v, err := newCpVolume(context.Background(), st, "", "test://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// localFile writes data to a new local file and returns its path.
func localFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// importFile puts data at p of v through cp --local.
func importFile(t *testing.T, v *cpVolume, p string, data []byte) {
	t.Helper()
	req := cpRequest{dst: v, local: true, src: localFile(t, "src", data), dstPath: p}
	if err := cpRun(context.Background(), req, io.Discard); err != nil {
		t.Fatalf("import %s: %v", p, err)
	}
}

// readVol reads the whole file at p of v, as a reader opening it now.
func readVol(t *testing.T, v *cpVolume, p string) []byte {
	t.Helper()
	b, err := readPath(v, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readPath reads the whole file at p of v.
func readPath(v *cpVolume, p string) ([]byte, error) {
	ctx := context.Background()
	n, err := v.resolve(context.Background(), p)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", p, err)
	}
	f, err := engine.Open(ctx, v.st, v.prefix(n.FileID), v.options(n.FileID, engine.Params{}, true))
	if errors.Is(err, engine.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if m, err := f.ReadAt(ctx, b, 0); m != len(b) {
		return nil, fmt.Errorf("read %s: %d of %d bytes: %w", p, m, len(b), err)
	}
	return b, nil
}

// tempNames are the names of the copies being built left in directory p.
func tempNames(t *testing.T, v *cpVolume, p string) []string {
	t.Helper()
	d, err := v.resolve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := v.ns.ReadDir(context.Background(), d.Ino)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name, cpTempPrefix) {
			out = append(out, e.Name)
		}
	}
	return out
}

// runCp runs "ckptfs ARGS..." and returns the exit status and output.
func runCp(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := run(append([]string{"ckptfs"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCpByReference: a copy inside a volume reads back byte-exact, is made by
// reference, and costs the same requests, sending no data, whatever the
// size of the file. A file of one block of at most 64 KiB is the one
// difference: its head carries its part 0, which the copy checks is stored
// (one GET) before pointing into it.
func TestCpByReference(t *testing.T) {
	ctx := context.Background()
	sizes := []int{64 << 10, 1 << 20, 8 << 20}
	counts := map[int]counting.Counts{}
	for i, size := range sizes {
		cs := counting.New(mem.New())
		v := formatStore(t, cs)
		data := randBytes(uint64(i), size)
		importFile(t, v, "/src", data)
		v = reopen(t, cs)
		cs.Reset()
		var out bytes.Buffer
		if err := cpRun(ctx, cpRequest{dst: v, src: "/src", dstPath: "/dst", verbose: true}, &out); err != nil {
			t.Fatalf("%d bytes: cp: %v", size, err)
		}
		c := cs.Snapshot()
		counts[size] = c
		if want := "copied /src -> /dst by reference\n"; out.String() != want {
			t.Errorf("%d bytes: -v printed %q, want %q", size, out.String(), want)
		}
		if sent := c.Total().BytesSent; sent > 32<<10 {
			t.Errorf("%d bytes: the copy sent %d bytes: not by reference", size, sent)
		}
		if got := readVol(t, reopen(t, cs), "/dst"); !bytes.Equal(got, data) {
			t.Errorf("%d bytes: the copy reads back %d bytes, not the source's", size, len(got))
		}
		if names := tempNames(t, reopen(t, cs), "/"); len(names) != 0 {
			t.Errorf("%d bytes: temporary names left: %q", size, names)
		}
	}
	small, mid, big := counts[64<<10], counts[1<<20], counts[8<<20]
	for _, op := range []staging.Op{staging.OpPut, staging.OpGet, staging.OpHead, staging.OpList, staging.OpDelete} {
		if a, b := mid.Op(op).Requests, big.Op(op).Requests; a != b {
			t.Errorf("%v requests: %d for 1 MiB, %d for 8 MiB: the copy's cost depends on the size", op, a, b)
		}
		extra := int64(0)
		if op == staging.OpGet {
			extra = 1 // the embedded part 0's check
		}
		if a, b := small.Op(op).Requests, big.Op(op).Requests; a != b+extra {
			t.Errorf("%v requests: %d for 64 KiB, %d for 8 MiB, want %d more", op, a, b, extra)
		}
	}
	t.Logf("a copy by reference: %v", big)
}

// TestCpSourceChangedAfter: writing the source after a copy, in place, does
// not change the copy, nor writing the copy the source.
func TestCpSourceChangedAfter(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	v := formatStore(t, st)
	data := randBytes(1, 1<<20+123)
	importFile(t, v, "/src", data)
	if err := cpRun(ctx, cpRequest{dst: v, src: "/src", dstPath: "/dst"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	write := func(p string, b []byte, off int64) {
		t.Helper()
		n, err := v.resolve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := v.params()
		if err != nil {
			t.Fatal(err)
		}
		f, err := engine.Open(ctx, v.st, v.prefix(n.FileID), v.options(n.FileID, p2, false))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(ctx, b, off); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	patch := bytes.Repeat([]byte{0xAB}, 200<<10)
	write("/src", patch, 300<<10)
	wantSrc := append([]byte{}, data...)
	copy(wantSrc[300<<10:], patch)
	if got := readVol(t, reopen(t, st), "/dst"); !bytes.Equal(got, data) {
		t.Fatal("a write to the source after the copy changed the copy")
	}
	if got := readVol(t, reopen(t, st), "/src"); !bytes.Equal(got, wantSrc) {
		t.Fatal("the source does not read back its own write")
	}
	write("/dst", []byte("copy"), 0)
	if got := readVol(t, reopen(t, st), "/src"); !bytes.Equal(got, wantSrc) {
		t.Fatal("a write to the copy changed the source")
	}
}

// swapWatch is a store that, after every namespace change lands, checks
// what a reader opening the volume then finds: check is called, with mu
// held, with the store as of that change.
type swapWatch struct {
	staging.Store
	mu    sync.Mutex
	check func(st staging.Store) // GUARDED_BY(mu)
}

func (s *swapWatch) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, data, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.check != nil && strings.HasPrefix(key, "ns/log/") {
		s.check(s.Store)
	}
	return info, err
}

func (s *swapWatch) watch(check func(st staging.Store)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.check = check
}

// TestCpReplacesAtomically: a copy over an existing file replaces it in one
// change: a reader opening the volume after any change of the copy finds
// DST whole, old or new, never missing and never a part; the old file is an
// orphan then (the cleaner's); mode, owner and mtime are the source's. A DST
// that is a directory receives DST/basename(SRC).
func TestCpReplacesAtomically(t *testing.T) {
	ctx := context.Background()
	w := &swapWatch{Store: mem.New()}
	v := formatStore(t, w)
	oldData, newData := randBytes(2, 300<<10), randBytes(3, 700<<10)
	importFile(t, v, "/dst", oldData)
	importFile(t, v, "/src", newData)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	srcNode, err := v.resolve(context.Background(), "/src")
	if err != nil {
		t.Fatal(err)
	}
	mode, uid, gid := uint32(0o751), uint32(1234), uint32(5678)
	if _, err := v.ns.SetAttr(ctx, srcNode.Ino, namespace.SetAttr{Mode: &mode, Uid: &uid, Gid: &gid, Mtime: &mtime}); err != nil {
		t.Fatal(err)
	}
	oldNode, err := v.resolve(context.Background(), "/dst")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	var failures []string
	w.watch(func(st staging.Store) {
		r, err := newCpVolume(ctx, st, "", "test://")
		if err != nil {
			failures = append(failures, err.Error())
			return
		}
		defer r.Close()
		n, err := r.resolve(context.Background(), "/dst")
		if err != nil {
			failures = append(failures, "DST: "+err.Error())
			return
		}
		switch got, err := readPath(r, "/dst"); {
		case err != nil:
			failures = append(failures, "DST: "+err.Error())
		case n.Ino == oldNode.Ino && bytes.Equal(got, oldData):
			seen = append(seen, "old")
		case n.Ino != oldNode.Ino && bytes.Equal(got, newData):
			seen = append(seen, "new")
		default:
			failures = append(failures, fmt.Sprintf("DST is %d bytes, neither file", len(got)))
		}
	})
	if err := cpRun(ctx, cpRequest{dst: v, src: "/src", dstPath: "/dst"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	w.watch(nil)
	if len(failures) > 0 {
		t.Fatalf("a reader during the copy found %q", failures)
	}
	if len(seen) < 2 || seen[0] != "old" || seen[len(seen)-1] != "new" || !strings.Contains(strings.Join(seen, " "), "old new") {
		t.Fatalf("readers found DST as %q: want old ... then new", seen)
	}
	r := reopen(t, w)
	n, err := r.resolve(context.Background(), "/dst")
	if err != nil {
		t.Fatal(err)
	}
	if o, err := r.ns.Orphaned(context.Background(), oldNode.FileID); err != nil || !o {
		t.Errorf("the replaced file is not an orphan (%v)", err)
	}
	if n.Mode != mode || n.Uid != uid || n.Gid != gid || n.MtimeNs != mtime.UnixNano() {
		t.Errorf("DST has mode %o owner %d:%d mtime %v, want the source's %o %d:%d %v",
			n.Mode, n.Uid, n.Gid, time.Unix(0, n.MtimeNs).UTC(), mode, uid, gid, mtime)
	}
	if names := tempNames(t, r, "/"); len(names) != 0 {
		t.Errorf("temporary names left: %q", names)
	}

	// DST a directory: DST/basename(SRC).
	if _, err := v.ns.Mkdir(ctx, namespace.RootIno, "dir", 0o755, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"/dir", "/dir/"} {
		if err := cpRun(ctx, cpRequest{dst: v, src: "/src", dstPath: dst}, io.Discard); err != nil {
			t.Fatalf("cp /src %s: %v", dst, err)
		}
		if got := readVol(t, reopen(t, w), "/dir/src"); !bytes.Equal(got, newData) {
			t.Fatalf("cp /src %s: /dir/src is not the source", dst)
		}
	}
}

// TestCpFallsBackToBytes: a copy that cannot be by reference (a copy of
// copies segment.MaxLineage deep) copies the bytes instead, and says so.
func TestCpFallsBackToBytes(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	v := formatStore(t, st)
	data := randBytes(4, 200<<10)
	importFile(t, v, "/f0", data)
	var last string
	for i := 0; ; i++ {
		var out bytes.Buffer
		req := cpRequest{dst: v, src: fmt.Sprintf("/f%d", i), dstPath: fmt.Sprintf("/f%d", i+1), verbose: true}
		if err := cpRun(ctx, req, &out); err != nil {
			t.Fatal(err)
		}
		last = out.String()
		if !strings.HasSuffix(last, " by reference\n") || i > 20 {
			break
		}
	}
	if want := fmt.Sprintf("(%d bytes)\n", len(data)); !strings.HasSuffix(last, want) {
		t.Fatalf("the copy past the deepest lineage printed %q, want a copy of bytes %q", last, want)
	}
	if !strings.HasPrefix(last, "copied /f16 -> /f17 ") {
		t.Errorf("the first copy of bytes was %q, want /f16 -> /f17", last)
	}
	if got := readVol(t, reopen(t, st), "/f17"); !bytes.Equal(got, data) {
		t.Fatal("the copy of bytes does not read back")
	}
}

// TestCpLocalAndFrom: a 5 MiB local file imported through the command reads
// back exact with the local file's mode and mtime, and so does a copy from
// another volume.
func TestCpLocalAndFrom(t *testing.T) {
	a, b := "file://"+t.TempDir(), "file://"+t.TempDir()
	for _, s := range []string{a, b} {
		if code, _, errOut := runCp("format", s); code != 0 {
			t.Fatalf("format: %s", errOut)
		}
	}
	data := randBytes(5, 5<<20)
	local := localFile(t, "big.bin", data)
	mtime := time.Date(2021, 6, 7, 8, 9, 10, 0, time.UTC)
	if err := os.Chmod(local, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(local, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCp("cp", "--local", "-v", a, local, "/"); code != 0 || out != fmt.Sprintf("copied %s -> / (%d bytes)\n", local, len(data)) {
		t.Fatalf("cp --local: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := runCp("cp", "--from", a, b, "/big.bin", "/copy"); code != 0 || out != "" {
		t.Fatalf("cp --from: exit %d, %q, %q", code, out, errOut)
	}
	for _, c := range []struct{ store, path string }{{a, "/big.bin"}, {b, "/copy"}} {
		code, out, errOut := runCp("cat", c.store, c.path)
		if code != 0 || out != string(data) {
			t.Fatalf("cat %s %s: exit %d, %d bytes (%s)", c.store, c.path, code, len(out), errOut)
		}
		d, err := dir.New(strings.TrimPrefix(c.store, "file://"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := reopen(t, d).resolve(context.Background(), c.path)
		if err != nil {
			t.Fatal(err)
		}
		if n.Mode != 0o640 || n.MtimeNs != mtime.UnixNano() || n.Uid != uint32(os.Getuid()) {
			t.Errorf("%s %s: mode %o mtime %v uid %d, want the local file's 640 %v %d", c.store, c.path, n.Mode, time.Unix(0, n.MtimeNs).UTC(), n.Uid, mtime, os.Getuid())
		}
	}
}

// TestCpErrors: bad usage exits 2, a copy that cannot be made exits 1, each
// with one line, and nothing is left behind.
func TestCpErrors(t *testing.T) {
	s := "file://" + t.TempDir()
	if code, _, errOut := runCp("format", s); code != 0 {
		t.Fatalf("format: %s", errOut)
	}
	local := localFile(t, "f", []byte("hello"))
	for _, args := range [][]string{{"cp", "--local", s, local, "/f"}, {"cp", "--local", s, local, "/g"}} {
		if code, _, errOut := runCp(args...); code != 0 {
			t.Fatalf("%q: %s", args, errOut)
		}
	}
	if code, _, errOut := runCp("cp", "--local", s, filepath.Dir(local), "/d"); code != 2 {
		t.Fatalf("setup: %d %s", code, errOut)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no DST", []string{"cp", s, "/f"}, 2, "want STORE SRC DST"},
		{"too many", []string{"cp", s, "/f", "/g", "/h"}, 2, "want STORE SRC DST"},
		{"SRC a directory", []string{"cp", s, "/", "/x"}, 2, "-r is not supported"},
		{"local SRC a directory", []string{"cp", "--local", s, filepath.Dir(local), "/x"}, 2, "-r is not supported"},
		{"--local and --from", []string{"cp", "--local", "--from", s, s, local, "/x"}, 2, "exclude each other"},
		{"unknown flag", []string{"cp", "-r", s, "/f", "/x"}, 2, "unknown shorthand flag"},
		{"missing SRC", []string{"cp", s, "/nope", "/x"}, 1, "/nope: no such file or directory"},
		{"missing local SRC", []string{"cp", "--local", s, local + ".nope", "/x"}, 1, "no such file or directory"},
		{"missing DST directory", []string{"cp", s, "/f", "/no/x"}, 1, "no such file or directory"},
		{"DST under a file", []string{"cp", s, "/f", "/g/x"}, 1, "not a directory"},
		{"SRC under a file", []string{"cp", s, "/f/x", "/y"}, 1, "/f/x: not a directory"},
		{"DST under a file, deeper", []string{"cp", s, "/f", "/g/x/y"}, 1, "/g/x/y: not a directory"},
		{"same file", []string{"cp", s, "/f", "/f"}, 1, "are the same file"},
		{"DST a directory's name", []string{"cp", s, "/f", "/"}, 1, "are the same file"},
		{"no volume", []string{"cp", "file://" + t.TempDir(), "/f", "/x"}, 1, "no ckptfs volume"},
		{"unknown option", []string{"cp", "-o", "nope=1", s, "/f", "/x"}, 2, `unknown options: nope=1`},
	}
	for _, c := range cases {
		code, out, errOut := runCp(c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ckptfs cp: ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.name, code, out, errOut, c.code, c.want)
		}
	}
	code, out, _ := runCp("ls", s)
	if code != 0 || strings.Contains(out, cpTempPrefix) || strings.Count(out, "\n") != 2 {
		t.Errorf("after the failed copies the volume lists %q", out)
	}
}

// TestCpFailureLeavesNoTemp: a copy whose publish fails returns the error,
// removes its temporary name and leaves DST as it was.
func TestCpFailureLeavesNoTemp(t *testing.T) {
	ctx := context.Background()
	fs := faulty.New(mem.New(), 1)
	v := formatStore(t, fs)
	old := randBytes(6, 100<<10)
	importFile(t, v, "/dst", old)
	importFile(t, v, "/src", randBytes(7, 100<<10))
	for _, local := range []bool{false, true} {
		id := fs.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "/" + volume.HeadName})
		req := cpRequest{dst: v, src: "/src", dstPath: "/dst"}
		if local {
			req = cpRequest{dst: v, local: true, src: localFile(t, "l", []byte("local")), dstPath: "/dst"}
		}
		err := cpRun(ctx, req, io.Discard)
		fs.Remove(id)
		if !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("local %v: cp with the head refused: %v", local, err)
		}
		r := reopen(t, fs)
		if names := tempNames(t, r, "/"); len(names) != 0 {
			t.Errorf("local %v: the failed copy left %q", local, names)
		}
		if got := readVol(t, r, "/dst"); !bytes.Equal(got, old) {
			t.Errorf("local %v: the failed copy changed DST", local)
		}
	}
}

// TestCpS3: on a real S3 server, an imported file and its copy by reference
// read back exact through the command.
func TestCpS3(t *testing.T) {
	c := s3test.Config(t)
	if c.AccessKey == "" {
		t.Skip("the server's credentials come from the environment")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", c.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", c.SecretKey)
	opts := "endpoint=" + c.Endpoint + ",path_style"
	if c.Region != "" {
		opts += ",region=" + c.Region
	}
	store := "s3://" + c.Bucket + "/" + strings.TrimSuffix(c.Prefix, "/")
	data := randBytes(8, 3<<20+17)
	local := localFile(t, "w.bin", data)
	steps := []struct {
		args []string
		out  string
	}{
		{[]string{"format", "-o", opts, store}, ""},
		{[]string{"cp", "-o", opts, "--local", store, local, "/w"}, ""},
		{[]string{"cp", "-o", opts, "-v", store, "/w", "/w2"}, "copied /w -> /w2 by reference\n"},
	}
	for _, s := range steps {
		code, out, errOut := runCp(s.args...)
		if code != 0 || (s.args[0] == "cp" && out != s.out) {
			t.Fatalf("%q: exit %d, %q, %q", s.args, code, out, errOut)
		}
	}
	for _, p := range []string{"/w", "/w2"} {
		if code, out, errOut := runCp("cat", "-o", opts, store, p); code != 0 || out != string(data) {
			t.Fatalf("cat %s: exit %d, %d bytes (%s)", p, code, len(out), errOut)
		}
	}
}

// walWrite opens file p of v with the WAL on, as a mount with wal=on does,
// and writes data at off: acknowledged once its record is stored, not
// published. The file is returned open: its writer is alive.
func walWrite(t *testing.T, v *cpVolume, p string, data []byte, off int64) *engine.File {
	t.Helper()
	ctx := context.Background()
	n, err := v.resolve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	wp, err := v.params()
	if err != nil {
		t.Fatal(err)
	}
	wp.WAL = true
	f, err := engine.Open(ctx, v.st, v.prefix(n.FileID), v.options(n.FileID, wp, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, data, off); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return f
}

// TestCpIncludesWALRecords: a copy of a file whose live writer has
// acknowledged writes in its WAL, not published, holds them: the bytes are
// copied (a copy by reference would take the head without them), and the
// writer's log and lease are left alone.
func TestCpIncludesWALRecords(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	v := formatStore(t, st)
	data := randBytes(7, 300<<10)
	importFile(t, v, "/f", data)
	tail := randBytes(8, 100<<10)
	w := walWrite(t, v, "/f", tail, 250<<10)
	defer w.Close()
	want := append(append([]byte(nil), data[:250<<10]...), tail...)
	var out bytes.Buffer
	if err := cpRun(ctx, cpRequest{dst: v, src: "/f", dstPath: "/copy", verbose: true}, &out); err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, reopen(t, st), "/copy"); !bytes.Equal(got, want) {
		t.Fatalf("the copy: %d bytes, want %d with the writer's acknowledged write (%s)", len(got), len(want), strings.TrimSpace(out.String()))
	}
	if strings.Contains(out.String(), "by reference") {
		t.Errorf("copied %q, want the bytes", out.String())
	}
	// The writer goes on and publishes: its log was its own.
	if err := w.Sync(ctx); err != nil {
		t.Fatalf("the writer's publish after the copy: %v", err)
	}
}

// TestCpAfterWALWriterGone: a copy of a file whose writer died with
// acknowledged writes in its WAL (records after the head, no live lease)
// holds them: cp replays and publishes them, as a mount's open does, and
// copies that checkpoint by reference.
func TestCpAfterWALWriterGone(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	v := formatStore(t, st)
	data := randBytes(9, 300<<10)
	importFile(t, v, "/f", data)
	tail := randBytes(10, 100<<10)
	// Closed without a flush: the record stays, the lease goes, as when a
	// writer is killed and its lease found dead.
	walWrite(t, v, "/f", tail, 250<<10).Close()
	want := append(append([]byte(nil), data[:250<<10]...), tail...)
	var out bytes.Buffer
	if err := cpRun(ctx, cpRequest{dst: v, src: "/f", dstPath: "/copy", verbose: true}, &out); err != nil {
		t.Fatal(err)
	}
	r := reopen(t, st)
	if got := readVol(t, r, "/copy"); !bytes.Equal(got, want) {
		t.Fatalf("the copy: %d bytes, want %d with the dead writer's acknowledged write (%s)", len(got), len(want), strings.TrimSpace(out.String()))
	}
	if got := readVol(t, r, "/f"); !bytes.Equal(got, want) {
		t.Fatalf("the source at its head after cp: %d bytes, want its records published", len(got))
	}
	if !strings.Contains(out.String(), "by reference") {
		t.Errorf("copied %q, want it by reference (of the replayed checkpoint)", out.String())
	}
}

// TestCpEmptyStoresHead: a copy of an empty file, and an empty file
// imported, have a head at once, in the format the tool wrote them in: a
// file without one is opened on each mount in that mount's format, which
// the first head to land may not be.
func TestCpEmptyStoresHead(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	v := formatStore(t, st)
	importFile(t, v, "/src", nil)
	if err := cpRun(ctx, cpRequest{dst: v, src: "/src", dstPath: "/dst"}, io.Discard); err != nil {
		t.Fatalf("cp: %v", err)
	}
	v = reopen(t, st)
	for _, p := range []string{"/src", "/dst"} {
		n, err := v.resolve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := engine.Open(ctx, v.st, v.prefix(n.FileID), v.options(n.FileID, engine.Params{}, true))
		if err != nil {
			t.Fatalf("%s: open: %v (want an empty file with a head)", p, err)
		}
		if s := f.Stat(); s.Size != 0 || s.Format.String() != v.desc.Format {
			t.Errorf("%s: %d bytes in format %v, want an empty file in the volume's %s", p, s.Size, s.Format, v.desc.Format)
		}
		f.Close()
	}
}
