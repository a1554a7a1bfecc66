package namespace

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// corruptRoot builds a root with three entries and a snapshot as of entry 3.
func corruptRoot(t *testing.T) *mem.Store {
	t.Helper()
	ctx := context.Background()
	store := mem.New()
	ns := openNS(t, store, Options{CompactEvery: 3})
	d, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Create(ctx, d.Ino, "f", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Symlink(ctx, RootIno, "s", "d/f", Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Create(ctx, d.Ino, "g", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	return store
}

func get(t *testing.T, s staging.Store, key string) []byte {
	t.Helper()
	data, _, err := s.Get(context.Background(), key, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(data)
}

// reseal rewrites the body of a sealed object and fixes its checksum, to
// build objects that pass the envelope but are wrong inside.
func reseal(data []byte, edit func(body []byte) []byte) []byte {
	return seal(data[5], data[4], edit(bytes.Clone(data[envHeaderLen:])))
}

func TestCorruptObjectsRefused(t *testing.T) {
	entry2 := LogKey(testRoot, 2)
	snap3 := SnapKey(testRoot, 3)
	cases := []struct {
		name string
		key  string
		edit func(t *testing.T, s *mem.Store, data []byte) []byte
	}{
		{"entry body byte flipped", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			d[len(d)-3] ^= 0x20
			return d
		}},
		{"entry kind byte flipped", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			d[5] = kindSnapshot
			return d
		}},
		{"entry truncated", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte { return d[:len(d)-1] }},
		{"entry header only", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte { return d[:10] }},
		{"entry empty", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte { return nil }},
		{"entry trailing byte", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte { return append(d, 0) }},
		{"entry bad magic", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			copy(d, "XXXX")
			return d
		}},
		{"entry future version", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			d[4] = 2
			crc := crc32.Update(crc32.Checksum(d[:12], castagnoli), castagnoli, d[envHeaderLen:])
			binary.LittleEndian.PutUint32(d[12:], crc)
			return d
		}},
		{"entry length lies", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			binary.LittleEndian.PutUint32(d[8:], uint32(len(d)))
			return d
		}},
		{"entry of another seq", entry2, func(t *testing.T, s *mem.Store, _ []byte) []byte {
			return get(t, s, LogKey(testRoot, 3))
		}},
		{"entry unknown field", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return append([]byte(`{"zz":1,`), b[1:]...) })
		}},
		{"entry unknown op", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`"k":"create"`), []byte(`"k":"chmod"`), 1) })
		}},
		{"entry that does not apply", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			// Create in a directory that does not exist.
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`"p":65536`), []byte(`"p":131073`), 1) })
		}},
		{"entry with a bad name", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`"n":"f"`), []byte(`"n":"a/b"`), 1) })
		}},
		{"entry with a bad id", entry2, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`"id":"`), []byte(`"id":"Z`), 1) })
		}},
		{"foreign key in the log", prefix(testRoot) + logDir + "readme", func(_ *testing.T, _ *mem.Store, _ []byte) []byte {
			return []byte("hello")
		}},
		{"snapshot byte flipped", snap3, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			d[envHeaderLen+5] ^= 1
			return d
		}},
		{"snapshot of another seq", snap3, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`"seq":3`), []byte(`"seq":2`), 1) })
		}},
		{"snapshot names a missing node", snap3, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`"i":131072,"c"`), []byte(`"i":131074,"c"`), 1) })
		}},
		{"snapshot without root", snap3, func(_ *testing.T, _ *mem.Store, d []byte) []byte {
			return reseal(d, func(b []byte) []byte { return bytes.Replace(b, []byte(`{"i":1,`), []byte(`{"i":9,`), 1) })
		}},
		{"snapshot as an entry", snap3, func(t *testing.T, s *mem.Store, _ []byte) []byte {
			return get(t, s, LogKey(testRoot, 3))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := corruptRoot(t)
			var old []byte
			if _, err := store.Head(ctx, tc.key); err == nil {
				old = get(t, store, tc.key)
			}
			bad := tc.edit(t, store, old)
			if _, err := store.Put(ctx, tc.key, bad, staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.key == snap3 {
				// Only the snapshot may be read.
				for s := uint64(1); s <= 3; s++ {
					_ = store.Delete(ctx, LogKey(testRoot, s))
				}
			} else {
				_ = store.Delete(ctx, snap3)
			}
			_, err := Open(ctx, store, testRoot, Options{})
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			if errors.Is(err, ErrExist) || errors.Is(err, ErrNotExist) {
				t.Fatalf("corruption reported as an operation error: %v", err)
			}
		})
	}
}

func TestEntryRoundTrip(t *testing.T) {
	mode, tm := uint32(0o600), int64(-5)
	cases := []entry{
		{Seq: 1, ID: NewFileID(), Time: 7, Op: &op{Kind: opCreate, Parent: 1, Name: "a", Mode: 0o644, Uid: 1, Gid: 2, FileID: NewFileID()}},
		{Seq: 2, ID: NewFileID(), Time: 8, Op: &op{Kind: opSymlink, Parent: 1, Name: "\xff\xfe", Target: "x\x80y"}},
		{Seq: 3, ID: NewFileID(), Op: &op{Kind: opRename, Parent: 1, Name: "a", NewParent: 65536, NewName: "b", Flags: 2}},
		{Seq: 4, ID: NewFileID(), Op: &op{Kind: opSetAttr, Ino: 65536, Attr: &attrRec{Mode: &mode, Mtime: &tm}}},
		{Seq: 5, ID: NewFileID(), Op: &op{Kind: opSetXattr, Ino: 65536, Name: "user.x", Value: []byte{0, 1, 2}}},
	}
	for _, want := range cases {
		key := LogKey("", want.Seq)
		got, err := decodeEntry(key, want.Seq, encodeEntry(&want))
		if err != nil {
			t.Fatalf("%s: %v", want.Op.Kind, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", *got, want)
		}
	}
}

func TestKeys(t *testing.T) {
	cases := []struct {
		root string
		seq  uint64
		log  string
	}{
		{"", 1, "ns/log/00000000000000000001"},
		{"vol", 42, "vol/ns/log/00000000000000000042"},
		{"/a/b/", ^uint64(0), "a/b/ns/log/18446744073709551615"},
	}
	for _, tc := range cases {
		if got := LogKey(tc.root, tc.seq); got != tc.log {
			t.Errorf("LogKey(%q, %d) = %q, want %q", tc.root, tc.seq, got, tc.log)
		}
		if seq, ok := parseSeq(LogKey(tc.root, tc.seq), prefix(tc.root)+logDir); !ok || seq != tc.seq {
			t.Errorf("parseSeq of %q = %d, %v", tc.log, seq, ok)
		}
	}
	if _, ok := parseSeq("ns/log/0000000000000000000x", logDir); ok {
		t.Error("parseSeq accepted a non-digit")
	}
	if _, ok := parseSeq("ns/log/99999999999999999999", logDir); ok {
		t.Error("parseSeq accepted a seq past uint64")
	}
}

// TestEntryOpsRefused: exactly one of "op" and "ops", and "ops" only for
// two ops or more.
func TestEntryOpsRefused(t *testing.T) {
	id := NewFileID()
	mk := `{"k":"mkdir","p":1,"n":"d","m":493}`
	mn := `{"k":"mknod","p":1,"n":"p","m":420,"ty":4}`
	cases := []struct {
		name    string
		body    string
		ok      bool
		version byte // 0: envVersionOps when body has "ops", else envVersion
	}{
		{"op", `{"seq":1,"id":"` + id + `","t":1,"op":` + mk + `}`, true, 0},
		{"ops", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `,` + mk + `]}`, true, 0},
		{"ops in a version 1 envelope", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `,` + mk + `]}`, false, envVersion},
		{"op in a version 2 envelope", `{"seq":1,"id":"` + id + `","t":1,"op":` + mk + `}`, false, envVersionOps},
		{"version 3 without a mknod", `{"seq":1,"id":"` + id + `","t":1,"op":` + mk + `}`, false, 3},
		{"version 4", `{"seq":1,"id":"` + id + `","t":1,"op":` + mk + `}`, false, 4},
		{"mknod", `{"seq":1,"id":"` + id + `","t":1,"op":` + mn + `}`, true, 3},
		{"mknod in ops", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `,` + mn + `]}`, true, 3},
		{"mknod in a version 1 envelope", `{"seq":1,"id":"` + id + `","t":1,"op":` + mn + `}`, false, envVersion},
		{"mknod in a version 2 envelope", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `,` + mn + `]}`, false, envVersionOps},
		{"type in a mkdir", `{"seq":1,"id":"` + id + `","t":1,"op":{"k":"mkdir","p":1,"n":"d","m":493,"ty":4}}`, false, 0},
		{"both", `{"seq":1,"id":"` + id + `","t":1,"op":` + mk + `,"ops":[` + mk + `,` + mk + `]}`, false, 0},
		{"neither", `{"seq":1,"id":"` + id + `","t":1}`, false, 0},
		{"null op", `{"seq":1,"id":"` + id + `","t":1,"op":null}`, false, 0},
		{"empty ops", `{"seq":1,"id":"` + id + `","t":1,"ops":[]}`, false, 0},
		{"one op as ops", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `]}`, false, 0},
		{"unknown op in ops", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `,{"k":"chmod"}]}`, false, 0},
		{"setattr without attributes in ops", `{"seq":1,"id":"` + id + `","t":1,"ops":[` + mk + `,{"k":"setattr","i":1}]}`, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.version
			if v == 0 {
				v = envVersion
				if strings.Contains(tc.body, `"ops"`) {
					v = envVersionOps
				}
			}
			_, err := decodeEntry("k", 1, seal(kindEntry, v, []byte(tc.body)))
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestOneOpEntryUnchanged: an entry of one op is byte for byte what it was
// before entries could hold several, so that old logs and old readers agree.
func TestOneOpEntryUnchanged(t *testing.T) {
	type oldEntry struct {
		Seq  uint64 `json:"seq"`
		ID   string `json:"id"`
		Time int64  `json:"t"`
		Op   op     `json:"op"`
	}
	o := op{Kind: opCreate, Parent: 1, Name: "a", Mode: 0o644, FileID: NewFileID()}
	id := NewFileID()
	old, err := json.Marshal(oldEntry{Seq: 3, ID: id, Time: 9, Op: o})
	if err != nil {
		t.Fatal(err)
	}
	if got := encodeEntry(newEntry(3, id, 9, []op{o})); !bytes.Equal(got, seal(kindEntry, envVersion, old)) {
		t.Fatalf("one-op entry:\n got %s\nwant %s", got[envHeaderLen:], old)
	}
}
