package segment

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func sampleLineage() Lineage {
	return Lineage{FileTag: FileTag("dst"), Cno: 9, Entries: []LineageEntry{
		{FileID: "0123456789abcdef0123456789abcdef", Upto: 3},
		{FileID: "src_2-B", Upto: 7},
	}}
}

func TestLineageRoundTrip(t *testing.T) {
	l := sampleLineage()
	b, err := EncodeLineage(l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeLineage(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.FileTag != l.FileTag || got.Cno != l.Cno || len(got.Entries) != 2 || got.Entries[0] != l.Entries[0] || got.Entries[1] != l.Entries[1] {
		t.Fatalf("decoded %+v, want %+v", got, l)
	}
	for _, c := range []struct {
		cno  uint64
		want int
	}{{1, 0}, {3, 0}, {4, 1}, {7, 1}, {8, -1}, {100, -1}} {
		if o := got.Owner(c.cno); o != c.want {
			t.Errorf("Owner(%d) = %d, want %d", c.cno, o, c.want)
		}
	}
	if (*Lineage)(nil).Owner(1) != -1 {
		t.Error("a file without a lineage owns every object")
	}
}

func TestLineageRefused(t *testing.T) {
	good, err := EncodeLineage(sampleLineage())
	if err != nil {
		t.Fatal(err)
	}
	reCRC := func(b []byte) []byte {
		le.PutUint32(b[len(b)-4:], Checksum(b[:len(b)-4]))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:20], ErrSize},
		{"long", append(bytes.Clone(good), make([]byte, MaxLineageBytes)...), ErrSize},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return reCRC(b) }), ErrBadMagic},
		{"crc", edit(func(b []byte) []byte { b[20] ^= 1; return b }), ErrChecksum},
		{"version 0", edit(func(b []byte) []byte { le.PutUint16(b[8:], 0); return reCRC(b) }), ErrInvalid},
		{"newer", edit(func(b []byte) []byte { le.PutUint16(b[8:], 2); return reCRC(b) }), ErrUnsupported},
		{"reserved", edit(func(b []byte) []byte { b[13] = 1; return reCRC(b) }), ErrInvalid},
		{"no entries", edit(func(b []byte) []byte { le.PutUint16(b[10:], 0); return reCRC(b) }), ErrInvalid},
		{"more entries than bytes", edit(func(b []byte) []byte { le.PutUint16(b[10:], 3); return reCRC(b) }), ErrSize},
		{"fewer entries than bytes", edit(func(b []byte) []byte { le.PutUint16(b[10:], 1); return reCRC(b) }), ErrSize},
		{"id leaves the volume", edit(func(b []byte) []byte { copy(b[lineageFixed+9:], "../"); return reCRC(b) }), ErrInvalid},
		{"id too long", edit(func(b []byte) []byte { b[lineageFixed+8] = 200; return reCRC(b) }), ErrSize},
		{"upto not ascending", edit(func(b []byte) []byte { le.PutUint64(b[lineageFixed:], 8); return reCRC(b) }), ErrInvalid},
		{"upto at its own cno", edit(func(b []byte) []byte { le.PutUint64(b[24:], 7); return reCRC(b) }), ErrInvalid},
		{"cno 0", edit(func(b []byte) []byte { le.PutUint64(b[24:], 0); return reCRC(b) }), ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeLineage(c.b)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	for _, l := range []Lineage{
		{Cno: 2},
		{Cno: 2, Entries: []LineageEntry{{FileID: "a/b", Upto: 1}}},
		{Cno: 2, Entries: []LineageEntry{{FileID: "a", Upto: 0}}},
		{Cno: 2, Entries: make([]LineageEntry, MaxLineage+1)},
	} {
		if _, err := EncodeLineage(l); !errors.Is(err, ErrInvalid) {
			t.Errorf("EncodeLineage(%+v) = %v, want ErrInvalid", l, err)
		}
	}
}

func TestReadLineage(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	l := sampleLineage()
	b, _ := EncodeLineage(l)
	if _, err := st.Put(ctx, LineageKey("f/dst/", 9), b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadLineage(ctx, st, "f/dst/", FileTag("dst"), 9); err != nil || got.Cno != 9 {
		t.Fatalf("ReadLineage = %+v, %v", got, err)
	}
	if _, err := ReadLineage(ctx, st, "f/dst/", FileTag("other"), 9); !errors.Is(err, ErrWrongObject) {
		t.Fatalf("another file's lineage: %v", err)
	}
	if _, err := st.Put(ctx, LineageKey("f/dst/", 10), b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLineage(ctx, st, "f/dst/", FileTag("dst"), 10); !errors.Is(err, ErrWrongObject) {
		t.Fatalf("a lineage under another checkpoint's name: %v", err)
	}
	if _, err := ReadLineage(ctx, st, "f/dst/", FileTag("dst"), 11); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("a missing lineage: %v", err)
	}
}

func FuzzDecodeLineage(f *testing.F) {
	good, _ := EncodeLineage(sampleLineage())
	f.Add(good)
	f.Add(good[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLineage(b)
		if err != nil {
			return
		}
		again, err := EncodeLineage(l)
		if err != nil {
			t.Fatalf("decoded lineage does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decode then encode changed the bytes")
		}
	})
}

// A head whose inode names a lineage is written as version 3 and reads back;
// any other head stays version 1 or 2 (older builds read it).
func TestHeadVersionOfALineage(t *testing.T) {
	ino := Inode{Cno: 9, Size: 4096, Format: FormatStream, Height: 1, DataBlockSize: 4096, MetaBlockSize: 4096,
		Root: Ptr{Cno: 3, Part: 1}, Parts: 1, Lineage: 9}
	b, err := EncodeHead(Head{FileTag: 7, Inode: ino, BlocksKnown: true, Blocks: 1})
	if err != nil {
		t.Fatal(err)
	}
	if v := le.Uint16(b[8:]); v != 3 {
		t.Fatalf("head version %d, want 3", v)
	}
	hd, err := DecodeHead(b)
	if err != nil || hd.Inode != ino {
		t.Fatalf("decoded %+v, %v", hd.Inode, err)
	}
	ino.Lineage = 0
	if b, err = EncodeHead(Head{FileTag: 7, Inode: ino, BlocksKnown: true}); err != nil || le.Uint16(b[8:]) != 2 {
		t.Fatalf("head without a lineage: version %d, %v", le.Uint16(b[8:]), err)
	}
	ino.Lineage = 10
	if _, err := EncodeHead(Head{FileTag: 7, Inode: ino}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a lineage made after its checkpoint: %v", err)
	}
}

// A part 0 whose inode names a lineage is layout version 2; a version that
// does not match its inodes is refused.
func TestHeaderVersionOfALineage(t *testing.T) {
	l := Layout{Format: FormatStream, DataBlockSize: 4096, MetaBlockSize: 4096}
	ino := Inode{Cno: 9, Format: FormatStream, DataBlockSize: 4096, MetaBlockSize: 4096, Parts: 1, Lineage: 9}
	for _, c := range []struct {
		lineage uint64
		want    uint16
	}{{9, 2}, {0, 1}} {
		ino.Lineage = c.lineage
		h, err := NewHeader(ObjectName{Cno: 9}, 7, l, &Inode{}, &ino)
		if err != nil {
			t.Fatal(err)
		}
		b, err := EncodeHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if v := le.Uint16(b[hOffVersion:]); v != c.want {
			t.Fatalf("lineage %d: layout version %d, want %d", c.lineage, v, c.want)
		}
		if got, err := DecodeHeader(b); err != nil || got.Inode != ino {
			t.Fatalf("lineage %d: decoded %+v, %v", c.lineage, got.Inode, err)
		}
		le.PutUint16(b[hOffVersion:], 3-c.want)
		le.PutUint32(b[hOffCRC:], Checksum(b[:hOffCRC]))
		if _, err := DecodeHeader(b); !errors.Is(err, ErrInvalid) {
			t.Fatalf("lineage %d under layout version %d: %v", c.lineage, 3-c.want, err)
		}
	}
}
