package test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// autoGCOpts are short settings of the background cleaner: a pass every
// second, graces of a second or none, the newest checkpoint kept.
const autoGCOpts = "gc_interval=1s,gc_grace=1s,gc_min_age=0,gc_ns_lag=0,gc_keep=1,gc_keep_for=0,flush_interval=0"

// filesHeld lists the objects under the volume's files: by file id, and
// the bytes of all.
func filesHeld(t *testing.T, st staging.Store) (map[string]int, int64) {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, ckvolume.FilesPrefix(""))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	var n int64
	for _, o := range objs {
		if id, _, ok := ckvolume.SplitFileKey(ckvolume.FilesPrefix(""), o.Key); ok {
			ids[id]++
		}
		n += o.Size
	}
	return ids, n
}

// poll calls ok until it says true, for at most a generous bound.
func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 3 minutes", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestBackgroundCleaner: a mount cleans its volume by itself. A file
// removed has its objects deleted, and a file rewritten keeps only what
// the policy keeps, with no command run; df shows what the files hold.
func TestBackgroundCleaner(t *testing.T) {
	v := newVolume(t)
	st := v.store()
	m := v.mount(autoGCOpts)
	keep := m.path("keep")
	for i := range 4 {
		if err := os.WriteFile(keep, []byte(strings.Repeat(string(rune('a'+i)), 100000)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := filesHeld(t, st)
	kept := keepID(before)
	if len(before) != 1 || before[kept] < 3 {
		t.Fatalf("the file written 4 times holds %v", before)
	}
	randomFile(t, m.path("big.bin"), 8<<20)
	after, _ := filesHeld(t, st)
	var big string
	for id := range after {
		if before[id] == 0 {
			big = id
		}
	}
	if big == "" {
		t.Fatal("big.bin stored no object")
	}
	if err := os.Remove(m.path("big.bin")); err != nil {
		t.Fatal(err)
	}
	poll(t, "big.bin's objects deleted and the kept file's old checkpoints dropped", func() bool {
		ids, _ := filesHeld(t, st)
		return ids[big] == 0 && len(ids) == 1 && ids[kept] < before[kept]
	})
	b, err := os.ReadFile(keep)
	if err != nil || string(b) != strings.Repeat("d", 100000) {
		t.Fatalf("the kept file reads %d bytes (%v) after the cleaner ran", len(b), err)
	}
	poll(t, "df shows what the files hold", func() bool {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(m.dir, &fs); err != nil {
			t.Fatal(err)
		}
		_, held := filesHeld(t, st)
		used := int64(fs.Blocks-fs.Bfree) * fs.Bsize
		// A v2 namespace counts no nodes (only v1's can without asking
		// the store: docs/namespace-v2.md §10, step 1): df shows none.
		nodes := uint64(2)
		if onV2() {
			nodes = 0
		}
		return used == (held+fs.Bsize-1)/fs.Bsize*fs.Bsize && fs.Files-fs.Ffree == nodes
	})
	m.unmount()
	fsckClean(t, st) // the lease and the pending records are no problem
	b, _, err = staging.GetLimited(context.Background(), st, ckvolume.GCLeaseKey(""), 1<<20)
	if err != nil || !strings.Contains(string(b), `"holder":""`) {
		t.Fatalf("the lease after unmount: %s, %v; want it let go", b, err)
	}
}

// keepID is the one id of ids.
func keepID(ids map[string]int) string {
	for id := range ids {
		return id
	}
	return ""
}

// TestBackgroundCleanerKeepsOpenOrphan: a file removed while this mount
// still holds it open keeps its objects, however long past its grace, and
// they go once it is closed. Another file removed after it shows that the
// grace of the first has passed and the passes ran.
func TestBackgroundCleanerKeepsOpenOrphan(t *testing.T) {
	v := newVolume(t)
	st := v.store()
	m := v.mount(autoGCOpts)
	newIDs := func(before map[string]int) string {
		now, _ := filesHeld(t, st)
		for id := range now {
			if before[id] == 0 {
				return id
			}
		}
		t.Fatal("the file stored no object")
		return ""
	}
	ids0, _ := filesHeld(t, st)
	randomFile(t, m.path("open.bin"), 1<<20)
	open := newIDs(ids0)
	f, err := os.Open(m.path("open.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(m.path("open.bin")); err != nil {
		t.Fatal(err)
	}
	ids1, _ := filesHeld(t, st)
	randomFile(t, m.path("later.bin"), 1<<20)
	later := newIDs(ids1)
	if err := os.Remove(m.path("later.bin")); err != nil {
		t.Fatal(err)
	}
	poll(t, "the file removed later reaped", func() bool {
		ids, _ := filesHeld(t, st)
		return ids[later] == 0
	})
	if ids, _ := filesHeld(t, st); ids[open] == 0 {
		t.Fatal("the cleaner reaped a file this mount holds open")
	}
	buf := make([]byte, 1<<20)
	if n, err := f.ReadAt(buf, 0); n != len(buf) {
		t.Fatalf("read of the open file: %d bytes, %v", n, err)
	}
	f.Close()
	poll(t, "the file reaped once closed", func() bool {
		ids, _ := filesHeld(t, st)
		return ids[open] == 0
	})
}
