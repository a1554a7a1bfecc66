package dir_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

func newDir(t *testing.T) *dir.Store {
	t.Helper()
	d, err := dir.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The contract runs without fsync: on this kind of disk each costs
// milliseconds and the suite writes thousands of objects. The synced path is
// covered by the other tests of Dir.
func TestDirContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store {
		d, err := dir.NewWith(t.TempDir(), dir.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// A large object's bytes are a plain file under the root, a small one's
// follow its commit record in the record's own file, and nothing internal
// shows up in a listing, even with an open upload.
func TestDirLayout(t *testing.T) {
	d := newDir(t)
	ctx := t.Context()
	big := bytes.Repeat([]byte("big bytes "), 20<<10) // more than a record holds
	if _, err := d.Put(ctx, "vol/files/42/inode", []byte("inode bytes"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Put(ctx, "vol/files/42/1.0", big, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateMultipart(ctx, "vol/files/42/big", staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	small, err := filepath.Glob(filepath.Join(d.Root(), "vol", "files", "42", "inode~*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(small) != 1 || !strings.HasSuffix(small[0], "~meta") {
		t.Fatalf("files of a small object: %q, want its record alone", small)
	}
	if b, err := os.ReadFile(small[0]); err != nil || !bytes.HasSuffix(b, []byte("}\ninode bytes")) || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("record of a small object: %q, %v; want the record, a newline and the bytes", b, err)
	}
	matches, err := filepath.Glob(filepath.Join(d.Root(), "vol", "files", "42", "1.0~*"))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil && bytes.Equal(b, big) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no file holds exactly the large object's bytes among %q", matches)
	}
	objs, err := staging.ListAll(ctx, d, "")
	if err != nil || len(objs) != 2 || objs[0].Key != "vol/files/42/1.0" || objs[1].Key != "vol/files/42/inode" ||
		objs[0].Size != int64(len(big)) || objs[1].Size != int64(len("inode bytes")) {
		t.Fatalf("list of everything: %+v, %v", objs, err)
	}
}

// Replacing an object moves between the two layouts and leaves no data file
// behind; a record written before records held objects still reads.
func TestDirInlineAndDataFile(t *testing.T) {
	d := newDir(t)
	ctx := t.Context()
	big := bytes.Repeat([]byte("0123456789abcdef"), 9<<10)
	for i, want := range [][]byte{[]byte("small"), big, []byte("small again"), {}, big} {
		if _, err := d.Put(ctx, "vol/k", want, staging.PutOptions{Metadata: map[string]string{"n": "v"}}); err != nil {
			t.Fatal(err)
		}
		got, info, err := d.Get(ctx, "vol/k", staging.Whole())
		if err != nil || !bytes.Equal(got, want) || info.Size != int64(len(want)) || info.Metadata["n"] != "v" {
			t.Fatalf("write %d: get %d bytes, %+v, %v; want %d bytes", i, len(got), info, err, len(want))
		}
		if len(want) > 3 {
			part, _, err := d.Get(ctx, "vol/k", staging.Range{Off: 1, Len: 3})
			if err != nil || !bytes.Equal(part, want[1:4]) {
				t.Fatalf("write %d: ranged get %q, %v; want %q", i, part, err, want[1:4])
			}
		}
		files, _ := filepath.Glob(filepath.Join(d.Root(), "vol", "k~*"))
		wantFiles := 1
		if len(want) == len(big) {
			wantFiles = 2
		}
		if len(files) != wantFiles {
			t.Fatalf("write %d (%d bytes): files %q, want %d", i, len(want), files, wantFiles)
		}
	}
	if err := d.Delete(ctx, "vol/k"); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(d.Root(), "vol", "k~*")); len(files) != 0 {
		t.Fatalf("files after delete: %q", files)
	}
	// A version-1 record, as earlier builds wrote every object.
	if err := os.WriteFile(filepath.Join(d.Root(), "vol", "old~abc"), []byte("old data"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := `{"v":1,"etag":"\"abc\"","size":8,"modified":"2026-01-01T00:00:00Z","data":"old~abc"}`
	if err := os.WriteFile(filepath.Join(d.Root(), "vol", "old~meta"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := d.Get(ctx, "vol/old", staging.Whole()); err != nil || string(got) != "old data" {
		t.Fatalf("get of a version-1 object: %q, %v", got, err)
	}
}

// A record holding an object is refused when its length disagrees with the
// size it states, or when it is longer than any record the store writes.
func TestDirInlineCorrupt(t *testing.T) {
	d := newDir(t)
	ctx := t.Context()
	if _, err := d.Put(ctx, "k", []byte("four"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Root(), "k~meta")
	rec, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"short":      rec[:len(rec)-1],
		"long":       append(slices.Clone(rec), 'x'),
		"huge":       append(slices.Clone(rec), make([]byte, 200<<10)...),
		"no newline": bytes.Repeat([]byte(" "), 20<<10),
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.Get(ctx, "k", staging.Whole()); !errors.Is(err, dir.ErrCorrupt) {
			t.Errorf("%s: get: %v, want ErrCorrupt", name, err)
		}
	}
}

// A commit record that is not the store's is refused as corrupt, not read.
func TestDirCorruptRecord(t *testing.T) {
	d := newDir(t)
	ctx := t.Context()
	if _, err := d.Put(ctx, "k", []byte("x"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Root(), "k~meta"), []byte(`{"v":1,"etag":"\"e\"","size":1,"data":"../../etc~x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Get(ctx, "k", staging.Whole()); !errors.Is(err, dir.ErrCorrupt) {
		t.Fatalf("get: %v, want ErrCorrupt", err)
	}
}

// Too long a segment for a file name is refused as an invalid key.
func TestDirLongSegment(t *testing.T) {
	d := newDir(t)
	_, err := d.Put(t.Context(), "a/"+strings.Repeat("x", 300), nil, staging.PutOptions{})
	if !errors.Is(err, staging.ErrInvalidKey) {
		t.Fatalf("put: %v, want ErrInvalidKey", err)
	}
}

const (
	raceEnvRole  = "CKPTFS_DIR_RACE_ROLE"
	raceEnvRoot  = "CKPTFS_DIR_RACE_ROOT"
	raceRounds   = 60
	raceGoMarker = "go"
)

// TestDirTwoProcesses races two processes on conditional writes of one key
// per round: exactly one wins each If-None-Match create and each If-Match
// replace.
func TestDirTwoProcesses(t *testing.T) {
	if role := os.Getenv(raceEnvRole); role != "" {
		raceChild(t, role, os.Getenv(raceEnvRoot))
		return
	}
	work := t.TempDir()
	root := filepath.Join(work, "store")
	d, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var etags []string
	for i := range raceRounds {
		info, err := d.Put(ctx, fmt.Sprintf("m/%d", i), []byte("initial"), staging.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		etags = append(etags, info.ETag)
	}
	if err := os.WriteFile(filepath.Join(work, "etags"), []byte(strings.Join(etags, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for _, role := range []string{"A", "B"} {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDirTwoProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), raceEnvRole+"="+role, raceEnvRoot+"="+work)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("process %s:\n%s", role, out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	if err := os.WriteFile(filepath.Join(work, raceGoMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	wins := map[string]map[int]string{"n": {}, "m": {}}
	for _, role := range []string{"A", "B"} {
		b, err := os.ReadFile(filepath.Join(work, "result-"+role))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			var kind string
			var round int
			if _, err := fmt.Sscanf(line, "%s %d", &kind, &round); err != nil {
				t.Fatalf("result line %q: %v", line, err)
			}
			if other, ok := wins[kind][round]; ok {
				t.Fatalf("%s round %d: processes %s and %s both won", kind, round, other, role)
			}
			wins[kind][round] = role
		}
	}
	for _, kind := range []string{"n", "m"} {
		for i := range raceRounds {
			winner, ok := wins[kind][i]
			if !ok {
				t.Fatalf("%s round %d: no process won", kind, i)
			}
			data, _, err := d.Get(ctx, fmt.Sprintf("%s/%d", kind, i), staging.Whole())
			if err != nil || string(data) != winner {
				t.Fatalf("%s round %d: object %q (%v), winner %s", kind, i, data, err, winner)
			}
		}
	}
}

func raceChild(t *testing.T, role, work string) {
	d, err := dir.New(filepath.Join(work, "store"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(work, "etags"))
	if err != nil {
		t.Fatal(err)
	}
	etags := strings.Split(string(b), "\n")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(work, raceGoMarker)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never told to start")
		}
		time.Sleep(time.Millisecond)
	}
	ctx := t.Context()
	var out strings.Builder
	for i := range raceRounds {
		_, err := d.Put(ctx, "n/"+strconv.Itoa(i), []byte(role), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
		switch {
		case err == nil:
			fmt.Fprintf(&out, "n %d\n", i)
		case !errors.Is(err, staging.ErrPrecondition):
			t.Fatalf("create round %d: %v", i, err)
		}
		_, err = d.Put(ctx, "m/"+strconv.Itoa(i), []byte(role), staging.PutOptions{Conditions: staging.Conditions{IfMatch: etags[i]}})
		switch {
		case err == nil:
			fmt.Fprintf(&out, "m %d\n", i)
		case !errors.Is(err, staging.ErrPrecondition):
			t.Fatalf("replace round %d: %v", i, err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "result-"+role), []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// "x" and "x/y" are both objects, as in S3 general purpose buckets (some
// S3-compatible servers refuse this, so it is not part of the contract).
func TestKeyAndFolder(t *testing.T) {
	for name, s := range map[string]staging.Store{"mem": mem.New(), "dir": newDir(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			keys := []string{"x", "x/y", "x/y/z"}
			for _, k := range keys {
				if _, err := s.Put(ctx, k, []byte("bytes of "+k), staging.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range keys {
				if data, _, err := s.Get(ctx, k, staging.Whole()); err != nil || string(data) != "bytes of "+k {
					t.Fatalf("get %s: %q, %v", k, data, err)
				}
			}
			objs, err := staging.ListAll(ctx, s, "")
			if err != nil || len(objs) != len(keys) {
				t.Fatalf("list: %+v, %v", objs, err)
			}
			for i, o := range objs {
				if o.Key != keys[i] {
					t.Fatalf("list: key %d is %q, want %q", i, o.Key, keys[i])
				}
			}
			if err := s.Delete(ctx, "x"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Head(ctx, "x/y"); err != nil {
				t.Fatalf("deleting x removed x/y: %v", err)
			}
		})
	}
}

// Readers racing a writer see one whole version or another, never a mix and
// never an error.
func TestReadersDuringOverwrite(t *testing.T) {
	for name, s := range map[string]staging.Store{"mem": mem.New(), "dir": newDir(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const size = 64 << 10
			if _, err := s.Put(ctx, "k", bytes.Repeat([]byte{0}, size), staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			werr := make(chan error, 1)
			go func() {
				defer close(done)
				for i := 1; i <= 100; i++ {
					if _, err := s.Put(ctx, "k", bytes.Repeat([]byte{byte(i)}, size), staging.PutOptions{}); err != nil {
						werr <- err
						return
					}
				}
			}()
			for reads := 0; ; reads++ {
				select {
				case <-done:
					select {
					case err := <-werr:
						t.Fatalf("writer: %v", err)
					default:
					}
					return
				default:
				}
				data, _, err := s.Get(ctx, "k", staging.Whole())
				if err != nil {
					t.Fatalf("read %d: %v", reads, err)
				}
				if len(data) != size || !bytes.Equal(data, bytes.Repeat(data[:1], size)) {
					t.Fatalf("read %d: a torn object of %d bytes", reads, len(data))
				}
			}
		})
	}
}

// A failed fsync of the folder after the commit record was renamed into
// place fails the write, but the record now names the new data file, so that
// file must stay: the object reads back whole (the new bytes, which the
// running system already shows), and the old data file stays too, in case a
// crash brings the old record back.
func TestDirSyncFailsAfterCommit(t *testing.T) {
	d := newDir(t)
	ctx := t.Context()
	// Objects too large to be held in their records: each has a data file.
	oldBytes, newBytes := strings.Repeat("old bytes ", 20<<10), strings.Repeat("new bytes ", 20<<10)
	if _, err := d.Put(ctx, "vol/k", []byte(oldBytes), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	errSync := errors.New("folder sync failed")
	dir.SetSyncHook(d, func(string) error { return errSync })
	_, err := d.Put(ctx, "vol/k", []byte(newBytes), staging.PutOptions{})
	dir.SetSyncHook(d, nil)
	if !errors.Is(err, errSync) {
		t.Fatalf("put with a failing folder sync: %v, want the sync's error", err)
	}
	b, _, err := d.Get(ctx, "vol/k", staging.Whole())
	if err != nil || string(b) != newBytes {
		t.Fatalf("get after the failed sync: %d bytes, %v; want the committed bytes", len(b), err)
	}
	matches, err := filepath.Glob(filepath.Join(d.Root(), "vol", "k~*"))
	if err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil && !strings.HasSuffix(m, "~meta") {
			data = append(data, string(b))
		}
	}
	slices.Sort(data)
	if !slices.Equal(data, []string{newBytes, oldBytes}) {
		t.Fatalf("data files after the failed sync: %d, want both the new and the old bytes", len(data))
	}
}

// Everything a directory store creates, its root included, is private to the
// user running it: objects are the contents of files.
func TestDirPrivate(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	d, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := d.Put(ctx, "vol/f/1/inode", []byte("x"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := d.CreateMultipart(ctx, "vol/f/1/big", staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.UploadPart(ctx, "vol/f/1/big", id, 1, []byte("part")); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if e.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("walked only %d entries", n)
	}
}

// A root that others can write is refused, with a message naming it.
func TestDirRefusesRootOthersCanWrite(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	if _, err := dir.New(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := dir.New(root)
	if err == nil {
		t.Fatalf("a root of mode 0777 was accepted")
	}
	if !strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("refusal %q does not name the root and the reason", err)
	}
}

// GetLimited refuses an object of gigabytes after a first read of 64 KiB: the
// object is sparse, so a whole read would allocate all of it.
func TestGetLimitedHugeObject(t *testing.T) {
	root := t.TempDir()
	d, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	storetest.HugeObject(t, root, "vol/huge", 64<<30)
	_, info, err := staging.GetLimited(t.Context(), d, "vol/huge", 1<<30)
	var tl *staging.TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, staging.ErrTooLarge) || tl.Size != 64<<30 || tl.Key != "vol/huge" {
		t.Fatalf("GetLimited of a 64 GiB object: %v, want a TooLargeError", err)
	}
	if info.Size != 64<<30 {
		t.Fatalf("info %+v", info)
	}
}
