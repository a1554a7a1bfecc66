package main

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ckptfs/ckptfs/test/campaign"
)

// The many-mounts mode (-many): the driver's operations are namespace
// changes, each through one of several mounts of a namespace v2 volume, on
// names of its own: its directory dN and the directories it makes inside
// (up to manyDepth deep), and the names "N.fK" of the shared directory
// campaign.ManyShared, where every driver works at once. Besides, it races
// the other drivers for names of the shared directory with O_EXCL
// (campaign.ManyRaceName). Package campaign documents the log.
const (
	manyFiles    = 8 // f0 .. f7 in a directory, N.f0 .. N.f7 in the shared one
	manySubdirs  = 4 // x0 .. x3
	manyDepth    = 3 // dN/xA/xB/xC at most
	manyMaxWrite = 8 << 10
)

// manyFile is one file of the driver's: its size and inode number (a
// mount's stale entry would lead an open by name to another).
type manyFile struct {
	size int64
	ino  uint64
}

type manyDriver struct {
	id     int
	iter   int
	root   string // dN
	mounts []string
	home   int
	rng    *rand.Rand
	seq    int64
	out    *os.File
	stop   chan struct{}
	dirs   map[string]bool      // own directories, root included
	names  map[string]*manyFile // own files' paths; a file of several names is one *manyFile
	gone   map[string]bool      // names removed or moved away in this run
	last   int                  // the mount of the last change or read
}

// runMany runs the many-mounts plan until stdin closes or an operation
// fails (but for the failure the model expects: EEXIST of a race).
func runMany(id, iter int, root string, mounts []string, home int, seed uint64, seqBase int64) error {
	d := &manyDriver{
		id: id, iter: iter, root: root, mounts: mounts, home: home,
		rng: rand.New(rand.NewPCG(seed, uint64(id))), seq: seqBase, out: os.Stdout, stop: make(chan struct{}),
		dirs: map[string]bool{}, names: map[string]*manyFile{}, gone: map[string]bool{}, last: home,
	}
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := os.Stdin.Read(buf); err != nil {
				close(d.stop)
				return
			}
		}
	}()
	if err := d.load(); err != nil {
		return err
	}
	for {
		select {
		case <-d.stop:
			return nil
		default:
		}
		if err := d.step(); err != nil {
			return err
		}
	}
}

// load reads what the driver owns through its home mount: the campaign
// checked it (and made dN and the shared directory) before.
func (d *manyDriver) load() error {
	base := d.mounts[d.home]
	byIno := map[uint64]*manyFile{}
	add := func(rel string, fi os.FileInfo) {
		st := fi.Sys().(*syscall.Stat_t)
		f := byIno[st.Ino]
		if f == nil {
			f = &manyFile{size: fi.Size(), ino: st.Ino}
			byIno[st.Ino] = f
		}
		d.names[rel] = f
	}
	err := filepath.Walk(filepath.Join(base, d.root), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if fi.IsDir() {
			d.dirs[rel] = true
		} else {
			add(rel, fi)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load %s: %w", d.root, err)
	}
	ents, err := os.ReadDir(filepath.Join(base, campaign.ManyShared))
	if err != nil {
		return fmt.Errorf("load %s: %w", campaign.ManyShared, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%d.", d.id)) {
			fi, err := e.Info()
			if err != nil {
				return fmt.Errorf("load %s: %w", e.Name(), err)
			}
			add(path.Join(campaign.ManyShared, e.Name()), fi)
		}
	}
	return nil
}

// do logs an operation, runs it and logs its end; it returns the errno
// (0: success) and errStop for an errno not in allowed.
func (d *manyDriver) do(kind string, m int, args []any, f func() ([]any, error), allowed ...syscall.Errno) (syscall.Errno, error) {
	d.seq++
	sargs := make([]string, len(args))
	for i, a := range args {
		sargs[i] = fmt.Sprint(a)
	}
	fmt.Fprintf(d.out, "B %d %d %s %d %s\n", d.seq, time.Now().UnixNano(), kind, m, strings.Join(sargs, " "))
	res, err := f()
	now := time.Now().UnixNano()
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EPROTO
			fmt.Fprintln(os.Stderr, "driver:", kind, err)
		}
		fmt.Fprintf(d.out, "E %d %d err %d\n", d.seq, now, int(errno))
		if slices.Contains(allowed, errno) {
			return errno, nil
		}
		return errno, errStop
	}
	sres := make([]string, len(res))
	for i, a := range res {
		sres[i] = fmt.Sprint(a)
	}
	fmt.Fprintf(d.out, "E %d %d ok %s\n", d.seq, now, strings.Join(sres, " "))
	return 0, nil
}

func (d *manyDriver) p(m int, rel string) string { return filepath.Join(d.mounts[m], rel) }

func (d *manyDriver) sortedDirs() []string  { return sortedKeys(d.dirs) }
func (d *manyDriver) sortedFiles() []string { return sortedKeys(d.names) }
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func depth(rel string) int { return strings.Count(rel, "/") }

// subdirs: own directories but the root.
func (d *manyDriver) subdirs() []string {
	var out []string
	for _, p := range d.sortedDirs() {
		if p != d.root {
			out = append(out, p)
		}
	}
	return out
}

func (d *manyDriver) empty(dir string) bool {
	for p := range d.names {
		if strings.HasPrefix(p, dir+"/") {
			return false
		}
	}
	for p := range d.dirs {
		if strings.HasPrefix(p, dir+"/") {
			return false
		}
	}
	return true
}

// freeFile draws a path for a file: in one of its directories or the
// shared one.
func (d *manyDriver) filePath() string {
	k := d.rng.IntN(manyFiles)
	dirs := d.sortedDirs()
	if d.rng.IntN(3) == 0 {
		return path.Join(campaign.ManyShared, fmt.Sprintf("%d.f%d", d.id, k))
	}
	return path.Join(dirs[d.rng.IntN(len(dirs))], fmt.Sprintf("f%d", k))
}

func (d *manyDriver) taken(rel string) bool { return d.dirs[rel] || d.names[rel] != nil }

// mount draws the mount of the next operation (its home half the time);
// when it is another than the last one's, the driver first waits until it
// shows the driver's names as the driver left them (a lookup miss may be
// answered from a listing up to ns_refresh old, and the kernel caches
// entries for a second).
func (d *manyDriver) mount() (int, error) {
	m := d.home
	if d.rng.IntN(2) == 0 {
		m = d.rng.IntN(len(d.mounts))
	}
	if m != d.last {
		if _, err := d.do("see", m, nil, func() ([]any, error) { return nil, d.see(m) }); err != nil {
			return 0, err
		}
	}
	d.last = m
	return m, nil
}

// see waits up to 20 s until mount m shows the driver's directories and
// files, each file with its inode number, and none of the names it removed
// (a mount's cached entry of a name renamed away or unlinked through
// another would lead an open with O_CREAT to the old file).
func (d *manyDriver) see(m int) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := d.sees(m)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return syscall.ETIMEDOUT
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *manyDriver) sees(m int) (bool, error) {
	want := map[string]map[string]bool{campaign.ManyShared: {}}
	for p := range d.dirs {
		want[p] = map[string]bool{}
	}
	for p := range d.dirs {
		if p != d.root {
			want[path.Dir(p)][path.Base(p)] = true
		}
	}
	for p := range d.names {
		want[path.Dir(p)][path.Base(p)] = true
	}
	own := fmt.Sprintf("%d.", d.id)
	for dir, names := range want {
		ents, err := os.ReadDir(d.p(m, dir))
		if errors.Is(err, syscall.ENOENT) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got := map[string]bool{}
		for _, e := range ents {
			if dir != campaign.ManyShared || strings.HasPrefix(e.Name(), own) {
				got[e.Name()] = true
			}
		}
		if len(got) != len(names) {
			return false, nil
		}
		for n := range names {
			if !got[n] {
				return false, nil
			}
			var st syscall.Stat_t
			rel := path.Join(dir, n)
			if err := syscall.Lstat(d.p(m, rel), &st); err != nil {
				if errors.Is(err, syscall.ENOENT) {
					return false, nil
				}
				return false, err
			}
			if (st.Mode&syscall.S_IFMT == syscall.S_IFDIR) != d.dirs[rel] {
				return false, nil
			}
			if f := d.names[rel]; f != nil && f.ino != 0 && f.ino != st.Ino {
				return false, nil
			}
		}
	}
	for g := range d.gone {
		if d.taken(g) {
			continue
		}
		var st syscall.Stat_t
		err := syscall.Lstat(d.p(m, g), &st)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTDIR) {
			return false, err
		}
	}
	return true, nil
}

func (d *manyDriver) step() error {
	switch r := d.rng.IntN(100); {
	case r < 18:
		return d.put(true)
	case r < 30:
		return d.put(false)
	case r < 38:
		return d.read()
	case r < 52:
		return d.renameFile()
	case r < 57:
		return d.link()
	case r < 66:
		return d.unlink()
	case r < 73:
		return d.mkdir()
	case r < 78:
		return d.rmdir()
	case r < 85:
		return d.renameDir()
	case r < 89:
		return d.moveDir()
	default:
		return d.race()
	}
}

// put: open with O_CREAT (O_EXCL when the name is new and a coin says so;
// with O_TRUNC now and then), one pwrite, close. Results: the inode number.
func (d *manyDriver) put(fresh bool) error {
	var rel string
	if fresh {
		rel = d.filePath()
		if d.taken(rel) {
			return nil
		}
	} else {
		files := d.sortedFiles()
		if len(files) == 0 {
			return nil
		}
		rel = files[d.rng.IntN(len(files))]
	}
	excl, trunc := 0, 0
	if fresh && d.rng.IntN(2) == 0 {
		excl = 1
	}
	if !fresh && d.rng.IntN(5) == 0 {
		trunc = 1
	}
	f := d.names[rel]
	size := int64(0)
	if f != nil && trunc == 0 {
		size = f.size
	}
	off := int64(0)
	if size > 0 {
		off = d.rng.Int64N(size + 1)
	}
	n := 1 + d.rng.IntN(manyMaxWrite)
	m, err := d.mount()
	if err != nil {
		return err
	}
	seq := d.seq + 1
	var ino uint64
	_, err = d.do("put", m, []any{rel, excl, trunc, off, n}, func() ([]any, error) {
		flags := os.O_WRONLY | os.O_CREATE
		if excl == 1 {
			flags |= os.O_EXCL
		}
		if trunc == 1 {
			flags |= os.O_TRUNC
		}
		fd, err := os.OpenFile(d.p(m, rel), flags, 0o644)
		if err != nil {
			return nil, err
		}
		if _, err := fd.WriteAt(campaign.Pattern(d.id, seq, off, n), off); err != nil {
			fd.Close()
			return nil, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fd.Fd()), &st); err != nil {
			fd.Close()
			return nil, err
		}
		ino = st.Ino
		return []any{st.Ino}, fd.Close()
	})
	if err != nil {
		return err
	}
	if f == nil {
		f = &manyFile{ino: ino}
		d.names[rel] = f
	}
	f.size = max(size, off+int64(n))
	return nil
}

// read: through the drawn mount, whole. Results: <len> <crc32c>.
func (d *manyDriver) read() error {
	files := d.sortedFiles()
	if len(files) == 0 {
		return nil
	}
	rel := files[d.rng.IntN(len(files))]
	m, err := d.mount()
	if err != nil {
		return err
	}
	_, err = d.do("read", m, []any{rel}, func() ([]any, error) {
		b, err := os.ReadFile(d.p(m, rel))
		if err != nil {
			return nil, err
		}
		return []any{len(b), crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))}, nil
	})
	return err
}

func (d *manyDriver) renameFile() error {
	files := d.sortedFiles()
	if len(files) == 0 {
		return nil
	}
	src := files[d.rng.IntN(len(files))]
	dst := d.filePath()
	if dst == src || d.dirs[dst] {
		return nil
	}
	m, err := d.mount()
	if err != nil {
		return err
	}
	if _, err := d.do("rename", m, []any{src, dst}, func() ([]any, error) {
		return nil, syscall.Rename(d.p(m, src), d.p(m, dst)) // os.Rename refuses a directory over a directory
	}); err != nil {
		return err
	}
	if d.names[dst] == d.names[src] {
		return nil // two names of one file: rename does nothing (POSIX)
	}
	d.names[dst] = d.names[src]
	delete(d.names, src)
	d.gone[src] = true
	return nil
}

func (d *manyDriver) link() error {
	files := d.sortedFiles()
	if len(files) == 0 {
		return nil
	}
	src := files[d.rng.IntN(len(files))]
	dst := d.filePath()
	if d.taken(dst) {
		return nil
	}
	m, err := d.mount()
	if err != nil {
		return err
	}
	if _, err := d.do("link", m, []any{src, dst}, func() ([]any, error) {
		return nil, os.Link(d.p(m, src), d.p(m, dst))
	}); err != nil {
		return err
	}
	d.names[dst] = d.names[src]
	return nil
}

func (d *manyDriver) unlink() error {
	files := d.sortedFiles()
	if len(files) == 0 {
		return nil
	}
	rel := files[d.rng.IntN(len(files))]
	m, err := d.mount()
	if err != nil {
		return err
	}
	if _, err := d.do("unlink", m, []any{rel}, func() ([]any, error) {
		return nil, syscall.Unlink(d.p(m, rel))
	}); err != nil {
		return err
	}
	delete(d.names, rel)
	d.gone[rel] = true
	return nil
}

func (d *manyDriver) mkdir() error {
	dirs := d.sortedDirs()
	parent := dirs[d.rng.IntN(len(dirs))]
	rel := path.Join(parent, fmt.Sprintf("x%d", d.rng.IntN(manySubdirs)))
	if d.taken(rel) || depth(rel) > manyDepth {
		return nil
	}
	m, err := d.mount()
	if err != nil {
		return err
	}
	if _, err := d.do("mkdir", m, []any{rel}, func() ([]any, error) {
		return nil, os.Mkdir(d.p(m, rel), 0o755)
	}); err != nil {
		return err
	}
	d.dirs[rel] = true
	return nil
}

func (d *manyDriver) rmdir() error {
	var cands []string
	for _, p := range d.subdirs() {
		if d.empty(p) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	rel := cands[d.rng.IntN(len(cands))]
	m, err := d.mount()
	if err != nil {
		return err
	}
	if _, err := d.do("rmdir", m, []any{rel}, func() ([]any, error) {
		return nil, syscall.Rmdir(d.p(m, rel))
	}); err != nil {
		return err
	}
	delete(d.dirs, rel)
	d.gone[rel] = true
	return nil
}

// moveTree renames directory src to dst in the driver's view: every path
// under it moves with it; an empty directory at dst is replaced.
func (d *manyDriver) moveTree(src, dst string) {
	delete(d.dirs, dst)
	for _, p := range d.sortedDirs() {
		if p == src || strings.HasPrefix(p, src+"/") {
			delete(d.dirs, p)
			d.gone[p] = true
			d.dirs[dst+strings.TrimPrefix(p, src)] = true
		}
	}
	for _, p := range d.sortedFiles() {
		if strings.HasPrefix(p, src+"/") {
			f := d.names[p]
			delete(d.names, p)
			d.gone[p] = true
			d.names[dst+strings.TrimPrefix(p, src)] = f
		}
	}
}

// renameDir renames a directory within its parent, to a free name or over
// an empty directory.
func (d *manyDriver) renameDir() error {
	subs := d.subdirs()
	if len(subs) == 0 {
		return nil
	}
	src := subs[d.rng.IntN(len(subs))]
	dst := path.Join(path.Dir(src), fmt.Sprintf("x%d", d.rng.IntN(manySubdirs)))
	if dst == src || d.names[dst] != nil || (d.dirs[dst] && !d.empty(dst)) {
		return nil
	}
	m, err := d.mount()
	if err != nil {
		return err
	}
	if _, err := d.do("rename", m, []any{src, dst}, func() ([]any, error) {
		return nil, syscall.Rename(d.p(m, src), d.p(m, dst)) // os.Rename refuses a directory over a directory
	}); err != nil {
		return err
	}
	d.moveTree(src, dst)
	return nil
}

// moveDir moves a directory into another of its directories (logged as
// "dmove"), through namespace v2's moves log.
func (d *manyDriver) moveDir() error {
	subs := d.subdirs()
	if len(subs) == 0 {
		return nil
	}
	src := subs[d.rng.IntN(len(subs))]
	dirs := d.sortedDirs()
	parent := dirs[d.rng.IntN(len(dirs))]
	if parent == path.Dir(src) || parent == src || strings.HasPrefix(parent, src+"/") {
		return nil
	}
	dst := path.Join(parent, fmt.Sprintf("x%d", d.rng.IntN(manySubdirs)))
	maxDepth := 0
	for p := range d.dirs {
		if p == src || strings.HasPrefix(p, src+"/") {
			maxDepth = max(maxDepth, depth(p)-depth(src))
		}
	}
	if d.taken(dst) || depth(dst)+maxDepth > manyDepth {
		return nil
	}
	m, err := d.mount()
	if err != nil {
		return err
	}
	errno, err := d.do("dmove", m, []any{src, dst}, func() ([]any, error) {
		return nil, syscall.Rename(d.p(m, src), d.p(m, dst)) // os.Rename refuses a directory over a directory
	})
	if err != nil || errno != 0 {
		return err
	}
	d.moveTree(src, dst)
	return nil
}

// race: at the next half-second boundary, O_EXCL create of the shared
// directory's race name for that half second (every driver that draws a
// race in that half second tries the same name), then one pwrite and
// close. Results: the inode number; EEXIST is an answer, not a failure.
func (d *manyDriver) race() error {
	m := d.rng.IntN(len(d.mounts))
	now := time.Now()
	slot := now.UnixNano()/int64(campaign.ManyRaceSlot) + 1
	time.Sleep(time.Until(time.Unix(0, slot*int64(campaign.ManyRaceSlot))))
	select {
	case <-d.stop:
		return errStop
	default:
	}
	rel := path.Join(campaign.ManyShared, campaign.ManyRaceName(d.iter, slot))
	n := 1 + d.rng.IntN(4096)
	seq := d.seq + 1
	_, err := d.do("race", m, []any{rel, n}, func() ([]any, error) {
		fd, err := os.OpenFile(d.p(m, rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, err
		}
		if _, err := fd.WriteAt(campaign.Pattern(d.id, seq, 0, n), 0); err != nil {
			fd.Close()
			return nil, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fd.Fd()), &st); err != nil {
			fd.Close()
			return nil, err
		}
		return []any{st.Ino}, fd.Close()
	}, syscall.EEXIST)
	return err
}
