package inspect

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// makeVolume builds, on a memory store, a volume with a file "x" of two
// checkpoints (v1 then v2) and a directory "d".
func makeVolume(t *testing.T) (staging.Store, string, []byte, []byte) {
	t.Helper()
	ctx := context.Background()
	st := mem.New()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns.Create(ctx, namespace.RootIno, "x", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	p := engine.DefaultParams()
	f, err := engine.Create(ctx, st, "f/"+n.FileID+"/", engine.Options{Params: p, FileID: n.FileID})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v1 := bytes.Repeat([]byte("0123456789abcdef"), 20000)
	v2 := append([]byte(nil), v1...)
	copy(v2[5000:], "changed")
	for _, data := range [][]byte{v1, v2} {
		if _, err := f.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return st, n.FileID, v1, v2
}

func TestListInfoCat(t *testing.T) {
	st, id, v1, v2 := makeVolume(t)
	ctx := context.Background()
	v, err := Open(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := v.List(ctx, "/")
	if err != nil || len(ents) != 2 || ents[0].Name != "d" || ents[1].Name != "x" || ents[1].Size != int64(len(v2)) || ents[1].FileID != id {
		t.Fatalf("List /: %+v, %v", ents, err)
	}
	fi, err := v.FileInfo(ctx, "/x")
	if err != nil {
		t.Fatal(err)
	}
	if len(fi.Checkpoints) != 2 || !fi.Checkpoints[0].Published || fi.Checkpoints[0].Cno <= fi.Checkpoints[1].Cno || fi.ColdReadGets == 0 {
		t.Fatalf("FileInfo: %+v", fi)
	}
	si, err := v.StoreInfo(ctx)
	if err != nil || si.Files != 1 || si.Dirs != 2 || si.Checkpoints != 2 || si.FileBytes != int64(len(v2)) {
		t.Fatalf("StoreInfo: %+v, %v", si, err)
	}
	old := fi.Checkpoints[1].Cno
	tests := []struct {
		name    string
		path    string
		cno     uint64
		off, n  int64
		want    []byte
		wantErr error
	}{
		{"latest", "x", 0, 0, -1, v2, nil},
		{"older", "x", old, 0, -1, v1, nil},
		{"range", "x", 0, 4990, 20, v2[4990:5010], nil},
		{"range at end", "x", 0, int64(len(v2)) - 3, 100, v2[len(v2)-3:], nil},
		{"no such checkpoint", "x", 99, 0, -1, nil, engine.ErrNotExist},
		{"directory", "d", 0, 0, -1, nil, ErrNotFile},
		{"missing", "nope", 0, 0, -1, nil, namespace.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := v.Cat(ctx, &buf, tt.path, tt.cno, tt.off, tt.n, nil)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(buf.Bytes(), tt.want) {
				t.Fatalf("%d bytes, %v; want %d bytes", buf.Len(), err, len(tt.want))
			}
		})
	}
}

func TestFsck(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, st staging.Store, id string) string // returns the key fsck must name
		problem string
	}{
		{"clean", func(*testing.T, staging.Store, string) string { return "" }, ""},
		{"head flipped", func(t *testing.T, st staging.Store, id string) string {
			return flip(t, st, "f/"+id+"/"+volume.HeadName, 30)
		}, "checksum"},
		{"header flipped", func(t *testing.T, st staging.Store, id string) string {
			k := objectKeys(t, st, id)[0]
			return flip(t, st, k, -10)
		}, "checksum"},
		{"data flipped", func(t *testing.T, st staging.Store, id string) string {
			k := objectKeys(t, st, id)[0]
			return flip(t, st, k, 3)
		}, "CRC"},
		{"part 0 gone", func(t *testing.T, st staging.Store, id string) string {
			keys := objectKeys(t, st, id)
			k := keys[len(keys)-1]
			if err := st.Delete(context.Background(), k); err != nil {
				t.Fatal(err)
			}
			return k
		}, "missing"},
		{"foreign key", func(t *testing.T, st staging.Store, id string) string {
			k := "f/" + id + "/junk"
			put(t, st, k)
			return k
		}, "unexpected key"},
		{"wal record and lease", func(t *testing.T, st staging.Store, id string) string {
			rec := wal.Encode(segment.FileTag(id), wal.Record{Seq: 4, Ops: []wal.Op{{Kind: wal.OpTruncate, Off: 3}}})
			for k, body := range map[string][]byte{wal.RecordKey("f/"+id+"/", 4): rec, "f/" + id + "/wal/owner": []byte("{}")} {
				if _, err := st.Put(context.Background(), k, body, staging.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			return ""
		}, ""},
		{"wal record corrupt", func(t *testing.T, st staging.Store, id string) string {
			k := wal.RecordKey("f/"+id+"/", 4)
			put(t, st, k)
			return k
		}, "a record has at least"},
		{"unreachable file", func(t *testing.T, st staging.Store, id string) string {
			k := "f/0123456789abcdef0123456789abcdef/inode"
			put(t, st, k)
			return k
		}, "not reachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, id, _, _ := makeVolume(t)
			ctx := context.Background()
			key := tt.damage(t, st, id)
			v, err := Open(ctx, st, "")
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			r, err := v.Fsck(ctx, "", func() { calls++ })
			if err != nil {
				t.Fatal(err)
			}
			if calls != r.Objects || r.Files != 1 {
				t.Fatalf("progress %d for %d objects, %d files", calls, r.Objects, r.Files)
			}
			if key == "" {
				if !r.OK() {
					t.Fatalf("problems in a clean volume: %v", r.Problems)
				}
				return
			}
			if r.OK() {
				t.Fatal("no problem found")
			}
			found := false
			for _, p := range r.Problems {
				if p.Key == key && strings.Contains(p.String(), tt.problem) {
					found = true
				}
			}
			if !found {
				t.Fatalf("problems %v: none names %s with %q", r.Problems, key, tt.problem)
			}
		})
	}
}

// objectKeys lists the checkpoint objects of a file, oldest first.
func objectKeys(t *testing.T, st staging.Store, id string) []string {
	t.Helper()
	all, err := staging.ListAll(context.Background(), st, "f/"+id+"/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range all {
		if segment.IsObjectName(strings.TrimPrefix(o.Key, "f/"+id+"/")) {
			out = append(out, o.Key)
		}
	}
	if len(out) == 0 {
		t.Fatal("no objects")
	}
	return out
}

// flip inverts one byte of key at off (negative: from the end).
func flip(t *testing.T, st staging.Store, key string, off int) string {
	t.Helper()
	ctx := context.Background()
	b, _, err := st.Get(ctx, key, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0xff
	if _, err := st.Put(ctx, key, b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return key
}

func put(t *testing.T, st staging.Store, key string) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, []byte("junk"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// info counts the write-ahead log records stored, not the lease.
func TestInfoWALRecords(t *testing.T) {
	ctx := context.Background()
	st, id, _, _ := makeVolume(t)
	rec := wal.Encode(segment.FileTag(id), wal.Record{Seq: 9, Ops: []wal.Op{{Kind: wal.OpWrite, Data: []byte("abc")}}})
	for k, body := range map[string][]byte{wal.RecordKey("f/"+id+"/", 9): rec, "f/" + id + "/wal/owner": []byte("{}")} {
		if _, err := st.Put(ctx, k, body, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Open(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := v.FileInfo(ctx, "/x")
	if err != nil {
		t.Fatal(err)
	}
	if fi.WALRecords != 1 || fi.WALBytes != int64(len(rec)) {
		t.Fatalf("info: %d WAL records, %d bytes; want 1 and %d", fi.WALRecords, fi.WALBytes, len(rec))
	}
}

// A file named and closed without writes stores nothing (Create sends no
// request): ls, info, cat and fsck take it for the empty file the mount
// shows. A small file whose head carries its part 0, not stored yet, is a
// note to fsck, not a problem, and info and cat read it from the head.
func TestUnwrittenAndInHeadFiles(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	ns, err := namespace.Open(ctx, mem, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := ns.Create(ctx, namespace.RootIno, "empty", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	small, err := ns.Create(ctx, namespace.RootIno, "small", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	p := engine.DefaultParams()
	e, err := engine.Create(ctx, mem, "f/"+empty.FileID+"/", engine.Options{Params: p, FileID: empty.FileID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = e.Close()
	faults := faulty.New(mem, 1)
	faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: ".0"})
	s, err := engine.Create(ctx, faults, "f/"+small.FileID+"/", engine.Options{Params: p, FileID: small.FileID})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a small file, in its head")
	if _, err := s.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if objs := keysUnder(t, mem, "f/"+small.FileID+"/"); len(objs) != 1 {
		t.Fatalf("small file's objects: %v, want the head alone", objs)
	}

	v, err := Open(ctx, mem, "")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := v.List(ctx, "/")
	if err != nil || len(ents) != 2 || ents[0].Size != 0 || ents[1].Size != int64(len(data)) {
		t.Fatalf("List /: %+v, %v", ents, err)
	}
	fi, err := v.FileInfo(ctx, "/empty")
	if err != nil || fi.Size != 0 || len(fi.Checkpoints) != 0 {
		t.Fatalf("info of the unwritten file: %+v, %v", fi, err)
	}
	fi, err = v.FileInfo(ctx, "/small")
	if err != nil || fi.Size != int64(len(data)) || len(fi.Checkpoints) != 1 || !fi.Checkpoints[0].InHead || !fi.Checkpoints[0].Published {
		t.Fatalf("info of the small file: %+v, %v", fi, err)
	}
	for _, c := range []struct {
		path string
		want []byte
	}{{"/empty", nil}, {"/small", data}} {
		var out bytes.Buffer
		if err := v.Cat(ctx, &out, c.path, 0, 0, -1, nil); err != nil || !bytes.Equal(out.Bytes(), c.want) {
			t.Fatalf("cat %s: %q, %v", c.path, out.Bytes(), err)
		}
	}
	r, err := v.Fsck(ctx, "", nil)
	if err != nil || !r.OK() {
		t.Fatalf("fsck: %v, problems %v", err, r.Problems)
	}
	if len(r.Notes) != 1 || !strings.HasSuffix(r.Notes[0].Key, "/0000000001.0") {
		t.Fatalf("fsck notes %v, want one for the part 0 in the head", r.Notes)
	}
}

func keysUnder(t *testing.T, st staging.Store, prefix string) []string {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// TestResolveErrors: a path through a file is ErrNotDir and a missing name
// ErrNotExist, each said as "resolve <path>: ...".
func TestResolveErrors(t *testing.T) {
	st, _, _, _ := makeVolume(t)
	v, err := Open(context.Background(), st, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want error
	}{
		{"/x/y", namespace.ErrNotDir},
		{"/x/y/z", namespace.ErrNotDir},
		{"/nope", namespace.ErrNotExist},
		{"/d/nope", namespace.ErrNotExist},
	} {
		_, err := v.Resolve(context.Background(), c.path)
		if !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), "resolve "+c.path+": ") {
			t.Errorf("Resolve(%s) = %v, want \"resolve %s: ...\" and %v", c.path, err, c.path, c.want)
		}
		if _, err := v.List(context.Background(), c.path); !errors.Is(err, c.want) {
			t.Errorf("List(%s) = %v, want %v", c.path, err, c.want)
		}
	}
}

// fsck of a directory checks every file below it, at any depth, and reads no
// object of a file elsewhere; a path that names nothing is an error.
func TestFsckDirectory(t *testing.T) {
	ctx := context.Background()
	st, xid, _, _ := makeVolume(t) // /x and the empty directory /d
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := volume.Resolve(ctx, ns, "/d")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := ns.Mkdir(ctx, d.Ino, "sub", 0o755, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	write := func(dir namespace.Ino, name string) string {
		n, err := ns.Create(ctx, dir, name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := engine.Create(ctx, st, "f/"+n.FileID+"/", engine.Options{Params: engine.DefaultParams(), FileID: n.FileID})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(ctx, bytes.Repeat([]byte(name), 5000), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return n.FileID
	}
	aid := write(d.Ino, "a")
	bid := write(sub.Ino, "b")
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	// /x is damaged: only a check that reaches it can tell.
	flip(t, st, objectKeys(t, st, xid)[0], 3)
	bad := flip(t, st, objectKeys(t, st, bid)[0], 3)
	mine := len(keysUnder(t, st, "f/"+aid+"/")) + len(keysUnder(t, st, "f/"+bid+"/"))

	v, err := Open(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path        string
		files, objs int
		problemKey  string // "" : none
		wantErr     error
	}{
		{"/d", 2, mine, bad, nil},
		{"d/", 2, mine, bad, nil},
		{"/d/sub", 1, len(keysUnder(t, st, "f/"+bid+"/")), bad, nil},
		{"/d/a", 1, len(keysUnder(t, st, "f/"+aid+"/")), "", nil},
		{"/nope", 0, 0, "", namespace.ErrNotExist},
		{"/d/nope/deeper", 0, 0, "", namespace.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r, err := v.Fsck(ctx, tt.path, nil)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Files != tt.files || r.Objects != tt.objs {
				t.Fatalf("%d files, %d objects; want %d, %d", r.Files, r.Objects, tt.files, tt.objs)
			}
			for _, p := range r.Problems {
				if p.Key != tt.problemKey {
					t.Fatalf("problem outside %s: %v", tt.path, p)
				}
			}
			if tt.problemKey != "" && len(r.Problems) == 0 {
				t.Fatalf("no problem found under %s", tt.path)
			}
			if tt.problemKey == "" && !r.OK() {
				t.Fatalf("problems: %v", r.Problems)
			}
		})
	}
}

// TestNodesWithoutData: FIFOs, sockets and device nodes are listed with
// their kind and no size, are not files to StoreInfo, and fsck of the
// volume, of their directory or of one of them passes them by.
func TestNodesWithoutData(t *testing.T) {
	st, _, _, v2 := makeVolume(t)
	ctx := context.Background()
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ns.Lookup(ctx, namespace.RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Mknod(ctx, d.Ino, "fifo", namespace.KindFIFO, 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Mknod(ctx, d.Ino, "sock", namespace.KindSocket, 0o755, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.MknodDevice(ctx, d.Ino, "null", namespace.KindCharDev, 0o666, 1, 3, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.MknodDevice(ctx, d.Ino, "sda", namespace.KindBlockDev, 0o660, 8, 0, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := v.List(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range ents {
		if e.Size != 0 || e.Cno != 0 || e.FileID != "" {
			t.Errorf("entry %+v has data", e)
		}
		kinds = append(kinds, e.Name+":"+e.Kind)
	}
	if got := strings.Join(kinds, " "); got != "fifo:fifo null:chardev sda:blockdev sock:socket" {
		t.Errorf("List /d: %s", got)
	}
	si, err := v.StoreInfo(ctx)
	if err != nil || si.Files != 1 || si.Dirs != 2 || si.FileBytes != int64(len(v2)) {
		t.Fatalf("StoreInfo: %+v, %v", si, err)
	}
	for _, p := range []string{"/", "/d"} {
		r, err := v.Fsck(ctx, p, nil)
		if err != nil || !r.OK() {
			t.Errorf("fsck %s: %+v, %v", p, r, err)
		}
	}
	if _, err := v.Fsck(ctx, "/d/null", nil); !errors.Is(err, ErrNotFile) {
		t.Errorf("fsck of a device node: %v, want ErrNotFile", err)
	}
}
