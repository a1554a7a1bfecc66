package test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/inspect"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// opsMountOpts send objects ahead in 12 MiB stream segments, so a 16 MiB file
// spans several objects and a rewrite of a placed block leaves a dead slot.
const opsMountOpts = "stream_segment_bytes=12M,segment_mpu_chunk_size=5M"

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func catBytes(t *testing.T, v *inspect.Volume, path string, cno uint64, off, n int64) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := v.Cat(context.Background(), &buf, path, cno, off, n, nil)
	return buf.Bytes(), err
}

// TestOpsInspect makes files with a real mount, then lists, describes, cats
// and checks them from the store alone: an older checkpoint, a range, a file
// with a dead slot, an upload left behind, and a corrupted data object.
func TestOpsInspect(t *testing.T) {
	vol := newVolume(t)
	m := vol.mount(opsMountOpts)
	ctx := context.Background()

	// "a": two checkpoints (close publishes one each time).
	randomFile(t, m.path("a"), 3<<20)
	old := readAll(t, m.path("a"))
	f, err := os.OpenFile(m.path("a"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{'x'}, 100<<10), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cur := readAll(t, m.path("a"))
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	randomFile(t, m.path("d/b"), 100<<10)

	// "dead": block 0 written again while its object is open.
	dead, err := os.Create(m.path("dead"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{1}, 1<<20)
	for i := range 6 {
		if _, err := dead.WriteAt(chunk, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dead.WriteAt(bytes.Repeat([]byte{2}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	for i := 6; i < 16; i++ {
		if _, err := dead.WriteAt(chunk, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	deadWant := readAll(t, m.path("dead"))

	// "c": several objects; one of them gets corrupted below.
	randomFile(t, m.path("c"), 16<<20)
	cWant := readAll(t, m.path("c"))
	m.unmount()

	st := vol.store()
	v, err := inspect.Open(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}

	// ls of the root and of a file.
	ents, err := v.List(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Kind+":"+e.Name)
	}
	if got, want := strings.Join(names, " "), "file:a file:c dir:d file:dead"; got != want {
		t.Fatalf("ls /: %s, want %s", got, want)
	}
	if ents, err := v.List(ctx, "d/b"); err != nil || len(ents) != 1 || ents[0].Size != 100<<10 || ents[0].Cno == 0 {
		t.Fatalf("ls d/b: %+v, %v", ents, err)
	}
	if _, err := v.List(ctx, "nope"); err == nil {
		t.Fatal("ls of a missing path succeeded")
	}

	// info of a file: two published checkpoints, objects, a cold read plan.
	fi, err := v.FileInfo(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var published []uint64
	for _, c := range fi.Checkpoints {
		if c.Published {
			published = append(published, c.Cno)
			if c.Size != 3<<20 || len(c.Objects) == 0 || c.Time.IsZero() {
				t.Errorf("checkpoint %+v: want size 3M, objects and a time", c)
			}
		}
	}
	if len(published) < 2 || fi.Cno != published[0] || fi.Size != 3<<20 {
		t.Fatalf("info a: cno %d size %d published %v", fi.Cno, fi.Size, published)
	}
	if fi.ColdReadGets < 1 || fi.ColdReadRequests < int64(fi.ColdReadGets) || fi.LiveBytes < fi.Size {
		t.Fatalf("info a: cold read %d GETs %d requests, live %d", fi.ColdReadGets, fi.ColdReadRequests, fi.LiveBytes)
	}
	if _, err := v.FileInfo(ctx, "d"); !errors.Is(err, inspect.ErrNotFile) {
		t.Fatalf("info of a directory: %v, want ErrNotFile", err)
	}

	// cat: whole, an older checkpoint, a range, a range past the end.
	oldest := published[len(published)-1]
	cats := []struct {
		name   string
		cno    uint64
		off, n int64
		want   []byte
	}{
		{"whole", 0, 0, -1, cur},
		{"older checkpoint", oldest, 0, -1, old},
		{"range", 0, 1<<20 - 10, 200, cur[1<<20-10 : 1<<20+190]},
		{"range of older", oldest, 1 << 20, 5, old[1<<20 : 1<<20+5]},
		{"past the end", 0, 4 << 20, 10, nil},
	}
	for _, tc := range cats {
		got, err := catBytes(t, v, "a", tc.cno, tc.off, tc.n)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("cat %s: %d bytes, %v; want %d bytes", tc.name, len(got), err, len(tc.want))
		}
	}

	// The file with a dead slot: info counts it, cat reads the last bytes.
	fd, err := v.FileInfo(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	if fd.DeadBytes < 64<<10 {
		t.Errorf("info dead: dead bytes %d, want at least one block", fd.DeadBytes)
	}
	if got, err := catBytes(t, v, "dead", 0, 0, -1); err != nil || !bytes.Equal(got, deadWant) {
		t.Errorf("cat dead: %v (equal %v)", err, bytes.Equal(got, deadWant))
	}

	// All is well so far.
	r, err := v.Fsck(ctx, "", nil)
	if err != nil || !r.OK() || r.Files != 4 || len(r.Leftovers) != 0 {
		t.Fatalf("fsck of a clean volume: %+v, %v", r, err)
	}

	// An upload left behind: a leftover, not a problem.
	node, err := v.Resolve(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	upKey := v.Prefix(node.FileID) + segment.ObjectName{Cno: 999, Part: 1}.String()
	id, err := st.CreateMultipart(ctx, upKey, staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UploadPart(ctx, upKey, id, 1, bytes.Repeat([]byte{3}, 5<<20)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.AbortMultipart(context.Background(), upKey, id) })
	r, err = v.Fsck(ctx, "", nil)
	if err != nil || !r.OK() || len(r.Leftovers) != 1 || r.Leftovers[0].Key != upKey {
		t.Fatalf("fsck with an upload left behind: %+v, %v", r, err)
	}
	if fi, err := v.FileInfo(ctx, "dead"); err != nil || len(fi.Uploads) != 1 {
		t.Fatalf("info dead with an open upload: %v, %v", fi.Uploads, err)
	}

	// Corrupt the object that holds block 0 of "c" (one byte of its data).
	cnode, err := v.Resolve(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	ef, err := engine.Open(ctx, st, v.Prefix(cnode.FileID), engine.Options{FileID: cnode.FileID})
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(ef.Stat().BlockSize)
	nb := int(int64(len(cWant)) / bs)
	pl, err := ef.BlockPlacement(ctx, 0, nb)
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	bad := pl[0].Key
	other := -1
	for i, p := range pl {
		if p.Key != bad {
			other = i
			break
		}
	}
	if other < 0 {
		t.Fatalf("every block of c is in %s: want several objects", bad)
	}
	body, info, err := st.Get(ctx, bad, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	body[pl[0].Offset+10] ^= 0xff
	if _, err := st.Put(ctx, bad, body, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}}); err != nil {
		t.Fatal(err)
	}

	r, err = v.Fsck(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || len(r.Problems) != 1 || r.Problems[0].Key != bad {
		t.Fatalf("fsck after corrupting %s: %v", bad, r.Problems)
	}
	if r, err := v.Fsck(ctx, "a", nil); err != nil || !r.OK() {
		t.Fatalf("fsck of another file: %v, %v", r.Problems, err)
	}
	_, err = catBytes(t, v, "c", 0, 0, bs)
	if err == nil || !errors.Is(err, segment.ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("cat of the corrupted range: %v; want a corruption error naming %s", err, bad)
	}
	off := int64(other) * bs
	got, err := catBytes(t, v, "c", 0, off, bs)
	if err != nil || !bytes.Equal(got, cWant[off:off+bs]) {
		t.Fatalf("cat of a range in %s, not the corrupted object: %v", pl[other].Key, err)
	}
}
