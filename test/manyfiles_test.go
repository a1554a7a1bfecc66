package test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// manyFilesStores are the stores the many-files tests run on: a folder of the
// local disk (file://) and the S3 server. Each call of open gives a new store
// over the same objects, as a new mount process would have.
var manyFilesStores = []struct {
	name string
	open func(t *testing.T) func() staging.Store
}{
	{"file", func(t *testing.T) func() staging.Store {
		root := t.TempDir()
		return func() staging.Store {
			d, err := dir.New(root)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
	}},
	{"s3", func(t *testing.T) func() staging.Store {
		cfg := s3test.Config(t)
		return func() staging.Store {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := s3.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}},
}

// smallTreeDirs are the directories of a small-file tree, nested a few deep
// as a source tree is ("" is the tree's top).
var smallTreeDirs = []string{"", "src", "src/pkg", "src/pkg/internal", "src/cmd", "docs", "docs/img/2026"}

// makeSmallTree writes n files of 100 to 8,192 bytes, their sizes, places
// and contents drawn from a fixed seed, under dir.
func makeSmallTree(t *testing.T, dir string, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(20261201, uint64(n)))
	for _, d := range smallTreeDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var seed [32]byte
	body := rand.NewChaCha8(seed)
	buf := make([]byte, 8192)
	for i := range n {
		sz := 100 + r.IntN(8192-100+1)
		_, _ = body.Read(buf[:sz]) // ChaCha8.Read never fails
		d := smallTreeDirs[r.IntN(len(smallTreeDirs))]
		p := filepath.Join(dir, d, fmt.Sprintf("f%05d.dat", i))
		if err := os.WriteFile(p, buf[:sz], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// treeSums describes every entry under dir by its relative path: "dir MODE
// MTIME", "link -> TARGET", or "file MODE MTIME SIZE SHA256" (contents read in
// full). MTIME is in whole seconds, all that tar keeps.
func treeSums(dir string) (map[string]string, error) {
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		attrs := fmt.Sprintf("%04o %d", fi.Mode().Perm(), fi.ModTime().Unix())
		switch {
		case d.IsDir():
			sums[rel] = "dir " + attrs
		case d.Type()&fs.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			sums[rel] = "link -> " + tgt
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			sums[rel] = fmt.Sprintf("file %s %d %s", attrs, len(b), hex.EncodeToString(h[:]))
		default:
			return fmt.Errorf("%s: unexpected type %v", rel, d.Type())
		}
		return nil
	})
	return sums, err
}

// without returns sums less the entries at or under top.
func without(sums map[string]string, top string) map[string]string {
	out := map[string]string{}
	for k, v := range sums {
		if k != top && !strings.HasPrefix(k, top+"/") {
			out[k] = v
		}
	}
	return out
}

// sameTree fails t with the first few differences between want and the tree
// under dir (less skip, when not "").
func sameTree(t *testing.T, what string, want map[string]string, dir, skip string) {
	t.Helper()
	got, err := treeSums(dir)
	if err != nil {
		t.Fatalf("%s: reading the tree: %v", what, err)
	}
	if skip != "" {
		got = without(got, skip)
	}
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %s)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s is %s, want %s", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s (%s) not in the source", k, g))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s: %d of %d entries differ, e.g.:\n%s", what, len(diffs), len(want), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
}

// lsSizes runs ls -lRn on dir and returns the size it shows of every regular
// file, by path relative to dir: what a cold directory listing reports,
// through the program users run.
func lsSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := run(t, dir, "ls", "-lRn", "--time-style=+%s", ".")
	sizes := map[string]int64{}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, ":") && !strings.Contains(line, " "):
			cur = strings.TrimPrefix(strings.TrimSuffix(line, ":"), "./")
			if cur == "." {
				cur = ""
			}
		case strings.HasPrefix(line, "-"):
			// mode links uid gid size time name (the names have no spaces)
			f := strings.Fields(line)
			if len(f) != 7 {
				t.Fatalf("ls -lRn line %q: want 7 fields", line)
			}
			n, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil {
				t.Fatalf("ls -lRn line %q: %v", line, err)
			}
			sizes[filepath.Join(cur, f[6])] = n
		}
	}
	return sizes
}

// sameSizes fails t with the first few differences between the sizes ls
// showed and the source's.
func sameSizes(t *testing.T, got, want map[string]int64) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s not listed (want %d bytes)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s listed with %d bytes, want %d", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s (%d bytes) not in the source", k, g))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("ls -lRn of the cold remount: %d of %d files differ, e.g.:\n%s", len(diffs), len(want), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
}

// gitIn runs git in dir with no configuration but the author's, so that the
// machine's settings cannot change what the test does.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("git", append([]string{"-c", "user.name=ckptfs test", "-c", "user.email=test@ckptfs.invalid",
		"-c", "init.defaultBranch=main", "-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	t.Logf("git %s: %v", strings.Join(args, " "), time.Since(start))
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// gitClean checks the repository at dir: fsck finds nothing, the work tree
// matches the commit, and the commit holds want files.
func gitClean(t *testing.T, dir string, want int) {
	t.Helper()
	if out := gitIn(t, dir, "fsck", "--full", "--strict", "--no-progress"); strings.TrimSpace(out) != "" {
		t.Fatalf("git fsck in %s:\n%s", dir, out)
	}
	if out := gitIn(t, dir, "status", "--porcelain", "--untracked-files=all"); out != "" {
		t.Fatalf("git status --porcelain in %s is not empty:\n%s", dir, out)
	}
	files := strings.Fields(gitIn(t, dir, "ls-tree", "-r", "--name-only", "HEAD"))
	if len(files) != want {
		t.Fatalf("the commit in %s holds %d files, want %d", dir, len(files), want)
	}
}

// mountWorks checks that m still serves changes: a file written reads back,
// a directory can be made and removed, and the root lists exactly want.
func mountWorks(t *testing.T, m *mount, want ...string) {
	t.Helper()
	probe := m.path("probe")
	if err := os.WriteFile(probe, []byte("still here"), 0o644); err != nil {
		t.Fatalf("the mount no longer takes a file: %v", err)
	}
	if b, err := os.ReadFile(probe); err != nil || string(b) != "still here" {
		t.Fatalf("probe reads %q, %v", b, err)
	}
	if err := os.Mkdir(m.path("probe.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.path("probe.d")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want = append(want, "probe")
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("root lists %q, want %q", names, want)
	}
}

// TestManyFiles drives the programs that make many small files through a real
// mount, on the local disk and on S3: tar -x of a tree of small files, git
// init, add and commit of it, rsync -a of the whole to another directory, and
// rm -rf of both. After each step it checks every file against the source
// (contents, modes, mtimes; the repository with git too), then mounts the
// volume again and checks what must have lasted; ls -lR of the cold remount
// shows the source's sizes.
//
// 1,500 files, 80 with -short (150 until 2026-12-05, when the two stores'
// runs took 4 to 5 minutes of the race pass, its longest test): CI runs
// -short under -race, where a namespace that lists its log before every
// change took 6 to 8 minutes for 150 on file:// (which lists a folder by
// reading all of it) and 2 to 3 on S3 (docs/benchmarks.md, "Namespace
// operations at scale").
func TestManyFiles(t *testing.T) {
	need(t, "tar", "git", "rsync", "ls", "rm")
	n := int(size(1500, 80))
	src := filepath.Join(t.TempDir(), "src")
	makeSmallTree(t, src, n)
	want, err := treeSums(src)
	if err != nil {
		t.Fatal(err)
	}
	wantSizes := lsSizes(t, src)
	if len(wantSizes) != n {
		t.Fatalf("ls -lRn of the source shows %d files, want %d", len(wantSizes), n)
	}
	tarball := filepath.Join(t.TempDir(), "src.tar")
	run(t, "", "tar", "-cf", tarball, "-C", src, ".")

	// The stores run at once: each has its own volume and mount, and much
	// of a step is the programs' and the store's waiting, not CPU.
	for _, sc := range manyFilesStores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			open := sc.open(t)
			m := mountStore(t, open(), "")
			remount := func() {
				t.Helper()
				m.unmount()
				m = mountStore(t, open(), "")
			}
			work, copyDir := m.path("work"), m.path("copy")

			// tar -x.
			if err := os.Mkdir(work, 0o755); err != nil {
				t.Fatal(err)
			}
			run(t, "", "tar", "-xf", tarball, "-C", work)
			sameTree(t, "after tar -x", want, work, "")
			remount()
			work, copyDir = m.path("work"), m.path("copy")
			sameSizes(t, lsSizes(t, work), wantSizes)
			sameTree(t, "after tar -x and a remount", want, work, "")

			// git init, add, commit.
			gitIn(t, work, "init", "-q")
			gitIn(t, work, "add", "-A")
			gitIn(t, work, "commit", "-q", "-m", "many small files")
			gitClean(t, work, n)
			sameTree(t, "after git commit", want, work, ".git")
			withGit, err := treeSums(work)
			if err != nil {
				t.Fatal(err)
			}
			remount()
			work, copyDir = m.path("work"), m.path("copy")
			sameTree(t, "the repository after a remount", withGit, work, "")
			gitClean(t, work, n)
			sameTree(t, "after git commit and a remount", want, work, ".git")

			// rsync -a of the whole, repository included. git status above
			// may have refreshed the index: compare with the tree as it is.
			if withGit, err = treeSums(work); err != nil {
				t.Fatal(err)
			}
			run(t, "", "rsync", "-a", work+"/", copyDir+"/")
			sameTree(t, "the rsync copy", withGit, copyDir, "")
			sameTree(t, "the rsync source", withGit, work, "")
			remount()
			work, copyDir = m.path("work"), m.path("copy")
			sameTree(t, "the rsync copy after a remount", withGit, copyDir, "")
			sameTree(t, "the rsync source after a remount", withGit, work, "")
			gitClean(t, copyDir, n)

			// rm -rf of both.
			run(t, "", "rm", "-rf", work, copyDir)
			for _, d := range []string{work, copyDir} {
				if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s after rm -rf: %v, want it gone", d, err)
				}
			}
			mountWorks(t, m)
			remount()
			if b, err := os.ReadFile(m.path("probe")); err != nil || string(b) != "still here" {
				t.Fatalf("probe after a remount reads %q, %v", b, err)
			}
			mountWorks(t, m)
		})
	}
}
