package nsv2

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

const root = "vol"

// Sample objects, one of each form.

func fileBinding() *Binding {
	return &Binding{Ino: 1<<20 | 5, Kind: namespace.KindFile, Node: &Attrs{
		Mode: 0o644, Uid: 1000, Gid: 100, Atime: 1, Mtime: 2, Ctime: 3, MtimeSet: 2, FileID: idB,
		Xattrs: []Xattr{{Name: "user.a", Value: []byte("v")}, {Name: "user.\xff", Value: []byte{}}},
	}}
}

func dirBinding() *Binding {
	return &Binding{Ino: 1<<20 | 6, Kind: namespace.KindDir, Frags: 16, Node: &Attrs{Mode: 0o755, Ctime: 9}}
}

func linkedBinding() *Binding { return &Binding{Ino: 1<<20 | 7, Kind: namespace.KindFile} }

func sampleInode() *Inode {
	return &Inode{Ino: 1<<20 | 7, Kind: namespace.KindFile, Nlink: 2, Change: idA,
		Node: Attrs{Mode: 0o600, FileID: idA}}
}

// linkOps is the op list of a node's first link: its name 1/"a" (F = 4)
// and the new name 2/"b" (F = 1) bound to it without attributes, and its
// inode object of two names.
func linkOps() []Op {
	n := sampleInode()
	n.Change = idB
	return []Op{
		{Dir: 1, Frags: 4, Name: "a", To: linkedBinding()},
		{Dir: 2, Frags: 1, Name: "b", To: linkedBinding()},
		{Ino: n.Ino, Inode: n},
	}
}

// lockedInodeSample is the inode object of linkOps' node locked by that change:
// out of force before it (nl 0).
func lockedInodeSample() *Inode {
	ops := linkOps()
	to := *ops[2].Inode
	return &Inode{Ino: ops[2].Ino, Kind: namespace.KindFile, Change: idB, Node: to.Node, Lock: &to, Ops: ops}
}

// renameOps is the op list of a rename of 1/"a" (in F = 4) to 2/"b" (F = 1)
// over a name of a node of two names.
func renameOps() []Op {
	n := sampleInode()
	n.Nlink = 1
	return []Op{
		{Dir: 1, Frags: 4, Name: "a"},
		{Dir: 2, Frags: 1, Name: "b", To: fileBinding()},
		{Ino: n.Ino, Inode: n},
	}
}

func sampleObjects() map[string]any {
	return map[string]any{
		"bound file": &Dentry{Dir: 2, Frags: 1, Name: "b", Change: idA, Bound: fileBinding()},
		"bound dir":  &Dentry{Dir: 1, Frags: 4, Name: "d", Change: idA, Bound: dirBinding()},
		"bound link": &Dentry{Dir: 1, Frags: 4, Name: "\x01é", Change: idA, Bound: linkedBinding()},
		"symlink": &Dentry{Dir: 1, Frags: 256, Name: "s", Change: idA, Bound: &Binding{Ino: 9, Kind: namespace.KindSymlink,
			Node: &Attrs{Mode: 0o777, Target: "../\xfe/t"}}},
		"device": &Dentry{Dir: 1, Frags: 1, Name: "null", Change: idA, Bound: &Binding{Ino: 10, Kind: namespace.KindCharDev,
			Node: &Attrs{Mode: 0o666, Major: namespace.MaxMajor, Minor: namespace.MaxMinor}}},
		"tombstone":         &Dentry{Dir: 1, Frags: 4, Name: "gone", Change: idB},
		"reaping tombstone": &Dentry{Dir: 1, Frags: 4, Name: "gone", Change: idB, Reap: idA},
		"locked source":     &Dentry{Dir: 1, Frags: 4, Name: "a", Change: idB, Bound: fileBinding(), Lock: &Lock{}, Ops: renameOps()},
		"locked new name":   &Dentry{Dir: 2, Frags: 1, Name: "b", Change: idB, Lock: &Lock{To: fileBinding()}, Ops: renameOps()},
		"resolved":          &Dentry{Dir: 2, Frags: 1, Name: "b", Change: idB, Bound: fileBinding(), Ops: renameOps()},
		"resolved source":   &Dentry{Dir: 1, Frags: 4, Name: "a", Change: idB, Ops: renameOps()},
		"inode":             sampleInode(),
		"inode out of force": &Inode{Ino: 1<<20 | 7, Kind: namespace.KindFile, Change: idA,
			Node: Attrs{Mode: 0o600, FileID: idA}},
		"locked inode":          lockedInodeSample(),
		"link decided":          &Decision{Tx: idB, Outcome: Commit, Ops: linkOps()},
		"commit":                &Decision{Tx: idB, Outcome: Commit, Ops: renameOps()},
		"abort":                 &Decision{Tx: idB, Outcome: Abort},
		"abort with ops":        &Decision{Tx: idB, Outcome: Abort, Ops: renameOps()},
		"batch":                 &Batch{N: 1 << 43, Mount: idA},
		"lease":                 &Lease{Dir: 2, Mount: idA, Renewal: 17},
		"seal":                  &Seal{Dir: 2, Tx: idB},
		"seal of a count":       &Seal{Dir: 2, Tx: idB, Was: 1, Frags: 256},
		"seal carrying a count": &Seal{Dir: 2, Tx: idB, Was: 16},
		"empty digest":          &Digest{Dir: 2, Frags: 1, Mount: idA},
		"digest": &Digest{Dir: 2, Frags: 16, Mount: idA, Names: []DigestName{
			{Name: "a", Bound: *fileBinding(), ETag: `"9b2cf535f27731c974343645a3985328"`},
			{Name: "b", Bound: *linkedBinding(), ETag: "e-2"},
			{Name: "d", Bound: *dirBinding(), ETag: "e-3"},
		}},
		"orphan": &Orphan{FileID: idB, Ino: 1<<20 | 5, Dir: 2, Frags: 1, Name: "b", Change: idA},
		"root": &RootAttrs{Change: idA, Node: Attrs{Mode: 0o1777, Uid: 1000, Gid: 100, Atime: 1, Mtime: 2, Ctime: 3,
			MtimeSet: 2, Xattrs: []Xattr{{Name: "user.r", Value: []byte("v")}}}},
	}
}

// codec is one kind's functions, on any.
type codec struct {
	kind   byte
	key    func(v any) (string, error)
	encode func(v any) ([]byte, error)
	decode func(key string, data []byte) (any, error)
}

func codecOf(v any) codec {
	switch v.(type) {
	case *Dentry:
		return codec{kindDentry, func(v any) (string, error) { return v.(*Dentry).Key(root) },
			func(v any) ([]byte, error) { return EncodeDentry(v.(*Dentry)) },
			func(k string, d []byte) (any, error) { return DecodeDentry(k, d) }}
	case *Inode:
		return codec{kindInode, func(v any) (string, error) { return v.(*Inode).Key(root) },
			func(v any) ([]byte, error) { return EncodeInode(v.(*Inode)) },
			func(k string, d []byte) (any, error) { return DecodeInode(k, d) }}
	case *Decision:
		return codec{kindDecision, func(v any) (string, error) { return v.(*Decision).Key(root) },
			func(v any) ([]byte, error) { return EncodeDecision(v.(*Decision)) },
			func(k string, d []byte) (any, error) { return DecodeDecision(k, d) }}
	case *Batch:
		return codec{kindBatch, func(v any) (string, error) { return v.(*Batch).Key(root) },
			func(v any) ([]byte, error) { return EncodeBatch(v.(*Batch)) },
			func(k string, d []byte) (any, error) { return DecodeBatch(k, d) }}
	case *Lease:
		return codec{kindLease, func(v any) (string, error) { return v.(*Lease).Key(root) },
			func(v any) ([]byte, error) { return EncodeLease(v.(*Lease)) },
			func(k string, d []byte) (any, error) { return DecodeLease(k, d) }}
	case *Seal:
		return codec{kindSeal, func(v any) (string, error) { return v.(*Seal).Key(root) },
			func(v any) ([]byte, error) { return EncodeSeal(v.(*Seal)) },
			func(k string, d []byte) (any, error) { return DecodeSeal(k, d) }}
	case *Digest:
		return codec{kindDigest, func(v any) (string, error) { return v.(*Digest).Key(root) },
			func(v any) ([]byte, error) { return EncodeDigest(v.(*Digest)) },
			func(k string, d []byte) (any, error) { return DecodeDigest(k, d) }}
	case *Orphan:
		return codec{kindOrphan, func(v any) (string, error) { return v.(*Orphan).Key(root) },
			func(v any) ([]byte, error) { return EncodeOrphan(v.(*Orphan)) },
			func(k string, d []byte) (any, error) { return DecodeOrphan(k, d) }}
	case *RootAttrs:
		return codec{kindRoot, func(v any) (string, error) { return v.(*RootAttrs).Key(root) },
			func(v any) ([]byte, error) { return EncodeRoot(v.(*RootAttrs)) },
			func(k string, d []byte) (any, error) { return DecodeRoot(k, d) }}
	}
	panic("no codec")
}

func TestRoundTrip(t *testing.T) {
	for name, v := range sampleObjects() {
		c := codecOf(v)
		key, err := c.key(v)
		if err != nil {
			t.Fatalf("%s: key: %v", name, err)
		}
		data, err := c.encode(v)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		got, err := c.decode(key, data)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("%s: round trip:\n got %+v\nwant %+v", name, got, v)
		}
	}
}

// sealRaw seals body as kind without checking it, to build objects that
// pass the envelope and are wrong inside.
func sealRaw(kind byte, body []byte) []byte {
	out := make([]byte, envHeaderLen+len(body))
	copy(out, envMagic)
	out[4], out[5] = kindVersion(kind), kind
	binary.LittleEndian.PutUint32(out[8:], uint32(len(body)))
	copy(out[envHeaderLen:], body)
	binary.LittleEndian.PutUint32(out[12:], checksum(out[:12], body))
	return out
}

// edited is sample name's object after edit, sealed without checks.
func edited(t *testing.T, name string, edit func(v any)) (codec, string, []byte) {
	t.Helper()
	v := sampleObjects()[name]
	c := codecOf(v)
	key, err := c.key(v)
	if err != nil {
		t.Fatal(err)
	}
	edit(v)
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return c, key, sealRaw(c.kind, body)
}

func wantCorrupt(t *testing.T, what, key string, err error) {
	t.Helper()
	var ce *namespace.CorruptError
	switch {
	case err == nil:
		t.Errorf("%s: decoded", what)
	case !errors.As(err, &ce) || !errors.Is(err, namespace.ErrCorrupt):
		t.Errorf("%s: %v, not a CorruptError", what, err)
	case ce.Key != key:
		t.Errorf("%s: error names %q, want %q", what, ce.Key, key)
	}
}

func TestEnvelopeRefused(t *testing.T) {
	v := sampleObjects()["bound file"]
	c := codecOf(v)
	key, _ := c.key(v)
	good, _ := c.encode(v)
	body := good[envHeaderLen:]
	for what, edit := range map[string]func(d []byte) []byte{
		"empty":           func(d []byte) []byte { return nil },
		"header only":     func(d []byte) []byte { return d[:envHeaderLen-1] },
		"bad magic":       func(d []byte) []byte { copy(d, "CKNS"); return d },
		"version 2":       func(d []byte) []byte { d[4] = 2; return d },
		"kind flipped":    func(d []byte) []byte { d[5] = kindInode; return d },
		"reserved set":    func(d []byte) []byte { d[6] = 1; return d },
		"truncated":       func(d []byte) []byte { return d[:len(d)-1] },
		"trailing byte":   func(d []byte) []byte { return append(d, 0) },
		"body byte":       func(d []byte) []byte { d[len(d)-2] ^= 0x20; return d },
		"crc":             func(d []byte) []byte { d[12] ^= 1; return d },
		"length over max": func(d []byte) []byte { binary.LittleEndian.PutUint32(d[8:], uint32(maxBody[kindDentry]+1)); return d },
		"unknown field": func([]byte) []byte {
			return sealRaw(kindDentry, append(bytes.TrimSuffix(bytes.Clone(body), []byte("}")), []byte(`,"zz":1}`)...))
		},
		"second value":   func([]byte) []byte { return sealRaw(kindDentry, append(bytes.Clone(body), []byte(" {}")...)) },
		"trailing space": func([]byte) []byte { return sealRaw(kindDentry, append(bytes.Clone(body), ' ')) },
		"not json":       func([]byte) []byte { return sealRaw(kindDentry, []byte("{")) },
		"a name of other fields": func([]byte) []byte {
			return sealRaw(kindDentry, bytes.Replace(body, []byte(`"n":"b"`), []byte(`"n":{"b":"Yg==","x":1}`), 1))
		},
	} {
		_, err := c.decode(key, edit(bytes.Clone(good)))
		wantCorrupt(t, what, key, err)
	}
	// A name as base64 is the same name.
	d, err := c.decode(key, sealRaw(kindDentry, bytes.Replace(body, []byte(`"n":"b"`), []byte(`"n":{"b":"Yg=="}`), 1)))
	if err != nil || !reflect.DeepEqual(d, v) {
		t.Fatalf("base64 name: %v", err)
	}
}

// TestInodeVersion: an inode object is envelope version 2 since hard links
// (a build before them refuses it as an unknown version); this build
// refuses a version-1 inode object, which no build wrote, and other kinds
// of version 2.
func TestInodeVersion(t *testing.T) {
	for _, name := range []string{"inode", "bound file"} {
		v := sampleObjects()[name]
		c := codecOf(v)
		key, _ := c.key(v)
		data, err := c.encode(v)
		if err != nil {
			t.Fatal(err)
		}
		want := byte(1)
		if c.kind == kindInode {
			want = 2
		}
		if data[4] != want {
			t.Fatalf("%s written as version %d, want %d", name, data[4], want)
		}
		other := bytes.Clone(data)
		other[4] = 3 - want
		binary.LittleEndian.PutUint32(other[12:], checksum(other[:12], other[envHeaderLen:]))
		_, err = c.decode(key, other)
		wantCorrupt(t, name+" of the other version", key, err)
		if err != nil && !strings.Contains(err.Error(), "unknown format version") {
			t.Errorf("%s of the other version: %v, want it named", name, err)
		}
	}
}

func TestObjectsRefused(t *testing.T) {
	big := make([]byte, namespace.MaxXattrValueLen)
	cases := []struct {
		what, sample string
		edit         func(v any)
	}{
		{"dentry at another name", "bound file", func(v any) { v.(*Dentry).Name = "c" }},
		{"dentry in another directory", "bound file", func(v any) { v.(*Dentry).Dir = 3 }},
		{"dentry of other fragments", "bound dir", func(v any) { v.(*Dentry).Frags = 2 }},
		{"dentry of 3 fragments", "bound dir", func(v any) { v.(*Dentry).Frags = 3 }},
		{"dentry of 512 fragments", "bound dir", func(v any) { v.(*Dentry).Frags = 512 }},
		{"bad change id", "bound file", func(v any) { v.(*Dentry).Change = "x" }},
		{"binding to ino 0", "bound file", func(v any) { v.(*Dentry).Bound.Ino = 0 }},
		{"unknown kind", "bound file", func(v any) { v.(*Dentry).Bound.Kind = 8 }},
		{"kind 0", "bound file", func(v any) { v.(*Dentry).Bound.Kind = 0 }},
		{"directory without fragments", "bound dir", func(v any) { v.(*Dentry).Bound.Frags = 0 }},
		{"directory of 6 fragments", "bound dir", func(v any) { v.(*Dentry).Bound.Frags = 6 }},
		{"directory without attributes", "bound dir", func(v any) { v.(*Dentry).Bound.Node = nil }},
		{"file with fragments", "bound file", func(v any) { v.(*Dentry).Bound.Frags = 1 }},
		{"mode past 07777", "bound file", func(v any) { v.(*Dentry).Bound.Node.Mode = 0o10644 }},
		{"file without id", "bound file", func(v any) { v.(*Dentry).Bound.Node.FileID = "" }},
		{"file id upper-case", "bound file", func(v any) { v.(*Dentry).Bound.Node.FileID = strings.ToUpper(idB) }},
		{"file with a target", "bound file", func(v any) { v.(*Dentry).Bound.Node.Target = "t" }},
		{"file with a device", "bound file", func(v any) { v.(*Dentry).Bound.Node.Minor = 1 }},
		{"directory with a file id", "bound dir", func(v any) { v.(*Dentry).Bound.Node.FileID = idA }},
		{"symlink without target", "symlink", func(v any) { v.(*Dentry).Bound.Node.Target = "" }},
		{"symlink target over 4095", "symlink", func(v any) { v.(*Dentry).Bound.Node.Target = Name(strings.Repeat("t", 4096)) }},
		{"symlink target with NUL", "symlink", func(v any) { v.(*Dentry).Bound.Node.Target = "a\x00" }},
		{"device major past 4095", "device", func(v any) { v.(*Dentry).Bound.Node.Major++ }},
		{"device minor past 2^20", "device", func(v any) { v.(*Dentry).Bound.Node.Minor++ }},
		{"attributes out of order", "bound file", func(v any) {
			x := v.(*Dentry).Bound.Node.Xattrs
			x[0], x[1] = x[1], x[0]
		}},
		{"attribute twice", "bound file", func(v any) { v.(*Dentry).Bound.Node.Xattrs[1].Name = "user.a" }},
		{"attribute outside user.", "bound file", func(v any) { v.(*Dentry).Bound.Node.Xattrs[0].Name = "trusted.a" }},
		{"attribute named user.", "bound file", func(v any) { v.(*Dentry).Bound.Node.Xattrs[0].Name = "user." }},
		{"attribute name over 255", "bound file", func(v any) {
			v.(*Dentry).Bound.Node.Xattrs[1].Name = Name("user." + strings.Repeat("z", 251))
		}},
		{"attribute value over 64 KiB", "bound file", func(v any) { v.(*Dentry).Bound.Node.Xattrs[0].Value = append(big, 0) }},
		{"attributes over 256 KiB", "bound file", func(v any) {
			n := v.(*Dentry).Bound.Node
			n.Xattrs = nil
			for _, s := range []string{"1", "2", "3", "4"} {
				n.Xattrs = append(n.Xattrs, Xattr{Name: Name("user." + s), Value: big})
			}
		}},
		{"lock without ops", "locked source", func(v any) { v.(*Dentry).Ops = nil }},
		{"ops without this name", "resolved", func(v any) { v.(*Dentry).Ops = v.(*Dentry).Ops[2:] }},
		{"lock to another binding than its op", "locked new name", func(v any) { v.(*Dentry).Lock.To = linkedBinding() }},
		{"resolved to another binding than its op", "resolved", func(v any) { v.(*Dentry).Bound = nil }},
		{"op of other fragments than the dentry", "resolved", func(v any) { v.(*Dentry).Ops[1].Frags = 2 }},
		{"ops over MaxOps", "resolved", func(v any) {
			d := v.(*Dentry)
			for i := 0; len(d.Ops) <= MaxOps; i++ {
				d.Ops = append(d.Ops, Op{Dir: 9, Frags: 1, Name: Name(string(rune('a' + i)))})
			}
		}},
		{"two ops on one name", "resolved", func(v any) { v.(*Dentry).Ops[0] = Op{Dir: 2, Frags: 1, Name: "b"} }},
		{"op on ino and name", "commit", func(v any) { v.(*Decision).Ops[2].Name = "x" }},
		{"op writing another inode", "commit", func(v any) { v.(*Decision).Ops[2].Ino++ }},
		{"op on directory 0", "commit", func(v any) { v.(*Decision).Ops[0].Dir = 0 }},
		{"op with a bad name", "commit", func(v any) { v.(*Decision).Ops[0].Name = "." }},
		{"op binding bad", "commit", func(v any) { v.(*Decision).Ops[1].To.Kind = 0 }},
		{"op name with an inode", "commit", func(v any) { v.(*Decision).Ops[0].Inode = sampleInode() }},
		{"commit without ops", "commit", func(v any) { v.(*Decision).Ops = nil }},
		{"unknown outcome", "commit", func(v any) { v.(*Decision).Outcome = "maybe" }},
		{"decision of another change", "commit", func(v any) { v.(*Decision).Tx = idA }},
		{"inode of a directory", "inode", func(v any) { v.(*Inode).Kind = namespace.KindDir }},
		{"inode with ops, not locked", "inode", func(v any) { v.(*Inode).Ops = linkOps() }},
		{"inode locked by another change", "locked inode", func(v any) { v.(*Inode).Change = idA }},
		{"inode lock of another ino", "locked inode", func(v any) { v.(*Inode).Lock.Ino++ }},
		{"inode lock locked", "locked inode", func(v any) { v.(*Inode).Lock.Lock = sampleInode() }},
		{"inode lock with ops", "locked inode", func(v any) { v.(*Inode).Lock.Ops = linkOps() }},
		{"inode lock bad", "locked inode", func(v any) { v.(*Inode).Lock.Nlink = MaxLinks + 1 }},
		{"inode lock without ops", "locked inode", func(v any) { v.(*Inode).Ops = nil }},
		{"inode lock disagrees with its op", "locked inode", func(v any) { v.(*Inode).Lock.Nlink = 3 }},
		{"inode lock without its op", "locked inode", func(v any) { v.(*Inode).Ops = v.(*Inode).Ops[:2] }},
		{"op writing a locked inode", "link decided", func(v any) { v.(*Decision).Ops[2].Inode.Lock = sampleInode() }},
		{"inode over MaxLinks", "inode", func(v any) { v.(*Inode).Nlink = MaxLinks + 1 }},
		{"inode of another ino", "inode", func(v any) { v.(*Inode).Ino++ }},
		{"inode without change", "inode", func(v any) { v.(*Inode).Change = "" }},
		{"batch of another number", "batch", func(v any) { v.(*Batch).N++ }},
		{"batch past 2^44", "batch", func(v any) { v.(*Batch).N = 1 << 44 }},
		{"batch without mount", "batch", func(v any) { v.(*Batch).Mount = "" }},
		{"lease of another mount", "lease", func(v any) { v.(*Lease).Mount = idB }},
		{"lease of another directory", "lease", func(v any) { v.(*Lease).Dir = 3 }},
		{"seal without change", "seal", func(v any) { v.(*Seal).Tx = "" }},
		{"seal of another directory", "seal", func(v any) { v.(*Seal).Dir = 1 }},
		{"digest of another mount", "digest", func(v any) { v.(*Digest).Mount = idB }},
		{"digest of 0 fragments", "digest", func(v any) { v.(*Digest).Frags = 0 }},
		{"digest names out of order", "digest", func(v any) {
			n := v.(*Digest).Names
			n[0], n[1] = n[1], n[0]
		}},
		{"digest name twice", "digest", func(v any) { v.(*Digest).Names[1].Name = "a" }},
		{"digest bad name", "digest", func(v any) { v.(*Digest).Names[0].Name = "a/b" }},
		{"digest bad binding", "digest", func(v any) { v.(*Digest).Names[2].Bound.Node = nil }},
		{"digest empty ETag", "digest", func(v any) { v.(*Digest).Names[0].ETag = "" }},
		{"digest ETag over 128", "digest", func(v any) { v.(*Digest).Names[0].ETag = strings.Repeat("e", 129) }},
		{"digest ETag with a newline", "digest", func(v any) { v.(*Digest).Names[0].ETag = "e\n" }},
		{"digest over MaxDigestNames", "empty digest", func(v any) {
			g := v.(*Digest)
			for i := 0; i <= MaxDigestNames; i++ {
				g.Names = append(g.Names, DigestName{Name: Name(hexN(uint64(i), 8)), Bound: *linkedBinding(), ETag: "e"})
			}
		}},
		{"orphan of another file", "orphan", func(v any) { v.(*Orphan).FileID = idA }},
		{"orphan of ino 0", "orphan", func(v any) { v.(*Orphan).Ino = 0 }},
		{"orphan of 5 fragments", "orphan", func(v any) { v.(*Orphan).Frags = 5 }},
		{"orphan bad name", "orphan", func(v any) { v.(*Orphan).Name = "" }},
		{"orphan bad change", "orphan", func(v any) { v.(*Orphan).Change = idA[1:] }},
	}
	for _, tc := range cases {
		c, key, data := edited(t, tc.sample, tc.edit)
		_, err := c.decode(key, data)
		wantCorrupt(t, tc.what, key, err)
		// What no decoder takes, no encoder writes, unless the object is
		// only at the wrong key.
		v := sampleObjects()[tc.sample]
		tc.edit(v)
		if k, err := c.key(v); err == nil && k != key {
			continue
		}
		if _, err := c.encode(v); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("%s: encode: %v, want ErrInvalid", tc.what, err)
		}
	}
}

// An empty list is written by omitting it; [] is refused, so that what
// decodes re-encodes to the same bytes.
func TestEmptyListsRefused(t *testing.T) {
	for _, c := range []struct{ sample, from, to string }{
		{"symlink", `"l":`, `"x":[],"l":`},
		{"bound file", `"b":{`, `"ops":[],"b":{`},
		{"abort", `"d":`, `"ops":[],"d":`},
		{"empty digest", `"m":`, `"e":[],"m":`},
	} {
		v := sampleObjects()[c.sample]
		cd := codecOf(v)
		key, _ := cd.key(v)
		good, _ := cd.encode(v)
		body := string(good[envHeaderLen:])
		if !strings.Contains(body, c.from) {
			t.Fatalf("%s: no %s in %s", c.sample, c.from, body)
		}
		_, err := cd.decode(key, sealRaw(cd.kind, []byte(strings.Replace(body, c.from, c.to, 1))))
		wantCorrupt(t, c.sample+" with "+c.to, key, err)
	}
}

func TestDecodeAtBadKey(t *testing.T) {
	for name, v := range sampleObjects() {
		c := codecOf(v)
		data, _ := c.encode(v)
		for _, key := range []string{"", "vol", "vol/ns2/x/1"} {
			_, err := c.decode(key, data)
			wantCorrupt(t, name+" at "+key, key, err)
		}
	}
	// An object copied under the key of another kind is refused by kind.
	d, _ := EncodeDentry(sampleObjects()["bound file"].(*Dentry))
	key, _ := OrphanKey(root, idB)
	_, err := DecodeOrphan(key, d)
	wantCorrupt(t, "dentry at an orphan's key", key, err)
}

// The largest objects the bounds allow fit their kind's maxBody.
func TestLargestObjectsFit(t *testing.T) {
	most := func(ino namespace.Ino) Attrs {
		a := Attrs{Mode: 0o7777, Uid: ^uint32(0), Gid: ^uint32(0), Atime: -1 << 63, Mtime: -1 << 63, Ctime: -1 << 63,
			MtimeSet: -1 << 63, FileID: idA}
		// Many short attributes of bytes that are not UTF-8 cost the most
		// JSON per byte counted.
		total := 0
		for i := 0; total+len("user.")+3+1 <= namespace.MaxXattrsLen; i++ {
			n := "user.\xff" + string([]byte{byte(1 + i/255), byte(1 + i%255)})
			a.Xattrs = append(a.Xattrs, Xattr{Name: Name(n), Value: []byte{0xff}})
			total += len(n) + 1
		}
		return a
	}
	a := most(1)
	b := &Binding{Ino: 1 << 62, Kind: namespace.KindFile, Node: &a}
	name := Name(strings.Repeat("\xff", namespace.MaxNameLen))
	ops := []Op{}
	for i := 0; i < MaxOps; i++ {
		ops = append(ops, Op{Dir: namespace.Ino(1<<62 + 1 + i), Frags: MaxFrags, Name: name, To: b})
	}
	ops[MaxOps-1] = Op{Dir: 1 << 62, Frags: MaxFrags, Name: name, To: b}
	d := &Dentry{Dir: 1 << 62, Frags: MaxFrags, Name: name, Change: idA, Bound: b, Lock: &Lock{To: b}, Ops: ops}
	if _, err := EncodeDentry(d); err != nil {
		t.Errorf("largest dentry: %v", err)
	}
	if _, err := EncodeDecision(&Decision{Tx: idA, Outcome: Commit, Ops: ops}); err != nil {
		t.Errorf("largest decision: %v", err)
	}
	if _, err := EncodeInode(&Inode{Ino: 1 << 62, Kind: namespace.KindFile, Nlink: MaxLinks, Change: idA, Node: a}); err != nil {
		t.Errorf("largest inode: %v", err)
	}
	// A locked inode object: its old body, its new one, and an op list of
	// the most nodes, one of them its own.
	to := &Inode{Ino: 1 << 62, Kind: namespace.KindFile, Nlink: MaxLinks, Change: idA, Node: a}
	iops := append(slices.Clone(ops[:MaxOps-1]), Op{Ino: 1 << 62, Inode: to})
	if _, err := EncodeInode(&Inode{Ino: 1 << 62, Kind: namespace.KindFile, Nlink: MaxLinks - 1, Change: idA, Node: a,
		Lock: to, Ops: iops}); err != nil {
		t.Errorf("largest locked inode: %v", err)
	}
	if _, err := EncodeOrphan(&Orphan{FileID: idA, Ino: 1 << 62, Dir: 1 << 62, Frags: MaxFrags, Name: name, Change: idA}); err != nil {
		t.Errorf("largest orphan: %v", err)
	}
	// A digest of the most names, each a directory (a binding with
	// attributes, without extended ones: those are left to the dentry's
	// GET when a digest would pass its bound).
	g := &Digest{Dir: 1 << 62, Frags: MaxFrags, Mount: idA}
	for i := 0; i < MaxDigestNames; i++ {
		n := Name(hexN(uint64(i), 4) + strings.Repeat("\xff", namespace.MaxNameLen-4))
		g.Names = append(g.Names, DigestName{Name: n, ETag: strings.Repeat("e", MaxETagLen),
			Bound: Binding{Ino: 1 << 62, Kind: namespace.KindDir, Frags: MaxFrags, Node: &Attrs{Mode: 0o7777, Atime: -1 << 63}}})
	}
	if _, err := EncodeDigest(g); err != nil {
		t.Errorf("largest digest: %v", err)
	}
}
