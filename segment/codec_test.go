package segment

import (
	"bytes"
	"errors"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestChecksumAndFileTag(t *testing.T) {
	// The CRC-32C check value of "123456789".
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("Checksum = %#x, want 0xe3069283", got)
	}
	if got, want := FileTag("abc"), xxh3.HashString("abc"); got != want {
		t.Fatalf("FileTag = %#x, want %#x", got, want)
	}
	if FileTag("a") == FileTag("b") {
		t.Fatal("distinct ids share a tag")
	}
}

func TestPtrRoundTrip(t *testing.T) {
	for _, p := range []Ptr{{}, {Cno: 1}, {Cno: 1<<64 - 1, Part: 1<<32 - 1, Slot: 1<<32 - 1}, {Cno: 9, Part: 2, Slot: 77}} {
		b := make([]byte, PtrSize)
		EncodePtr(b, p)
		if got := DecodePtr(b); got != p {
			t.Errorf("DecodePtr(EncodePtr(%v)) = %v", p, got)
		}
	}
	b := make([]byte, PtrSize)
	EncodePtr(b, Ptr{Cno: 0x0102030405060708, Part: 0x0a0b0c0d, Slot: 0x11121314})
	want := []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a, 0x14, 0x13, 0x12, 0x11}
	if !bytes.Equal(b, want) {
		t.Fatalf("EncodePtr = % x, want % x", b, want)
	}
}

func TestInodeRoundTrip(t *testing.T) {
	empty := Inode{Cno: 0, Format: FormatStream, DataBlockSize: 1 << 20, MetaBlockSize: 1 << 16}
	for _, in := range []Inode{
		{},
		empty,
		testInode(9, FormatParted),
		testInode(1<<40, FormatStream),
		{Cno: 5, Size: 1<<64 - 1, Format: FormatParted, Height: MaxHeight, DataBlockSize: MinDataBlockSize,
			MetaBlockSize: MaxMetaBlockSize, Root: Ptr{Cno: 1, Part: 7, Slot: 3}, Parts: 1<<32 - 1, MtimeNs: 1 << 62},
	} {
		b := make([]byte, InodeSize)
		EncodeInode(b, in)
		got, err := DecodeInode(b)
		if err != nil {
			t.Fatalf("DecodeInode(%+v): %v", in, err)
		}
		if got != in {
			t.Fatalf("round trip: got %+v, want %+v", got, in)
		}
	}
}

func TestInodeLayout(t *testing.T) {
	in := Inode{Cno: 3, Size: 10, Format: FormatStream, Height: 1, DataBlockSize: 4096, MetaBlockSize: 512,
		Parts: 2, Root: Ptr{Cno: 3, Part: 1, Slot: 4}, MtimeNs: 99}
	b := make([]byte, InodeSize)
	EncodeInode(b, in)
	checks := []struct {
		off  int
		want []byte
	}{
		{0, []byte{3, 0, 0, 0, 0, 0, 0, 0}},
		{8, []byte{10, 0, 0, 0, 0, 0, 0, 0}},
		{16, []byte{2, 1, 0, 0}},
		{20, []byte{0, 0x10, 0, 0}},
		{24, []byte{0, 2, 0, 0}},
		{28, []byte{2, 0, 0, 0}},
		{32, []byte{3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0}},
		{48, []byte{99, 0, 0, 0, 0, 0, 0, 0}},
		{56, make([]byte, 24)},
	}
	for _, c := range checks {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("bytes at %d = % x, want % x", c.off, got, c.want)
		}
	}
}

func TestInodeRefusals(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(in *Inode)
		raw    func(b []byte)
	}{
		{name: "format 0", mutate: func(in *Inode) { in.Format = 0 }},
		{name: "format 3", mutate: func(in *Inode) { in.Format = 3 }},
		{name: "height over max", mutate: func(in *Inode) { in.Height = MaxHeight + 1 }},
		{name: "data block size not power of two", mutate: func(in *Inode) { in.DataBlockSize = 4097 }},
		{name: "data block size too small", mutate: func(in *Inode) { in.DataBlockSize = MinDataBlockSize / 2 }},
		{name: "data block size too large", mutate: func(in *Inode) { in.DataBlockSize = MaxDataBlockSize * 2 }},
		{name: "meta block size zero", mutate: func(in *Inode) { in.MetaBlockSize = 0 }},
		{name: "meta block size too large", mutate: func(in *Inode) { in.MetaBlockSize = MaxMetaBlockSize * 2 }},
		{name: "root zero with height", mutate: func(in *Inode) { in.Root = Ptr{} }},
		{name: "root without checkpoint", mutate: func(in *Inode) { in.Root = Ptr{Slot: 3} }},
		{name: "root with height 0", mutate: func(in *Inode) { in.Height = 0 }},
		{name: "root in a later checkpoint", mutate: func(in *Inode) { in.Root.Cno = in.Cno + 1 }},
		{name: "reserved 18", raw: func(b []byte) { b[18] = 1 }},
		{name: "reserved 79", raw: func(b []byte) { b[79] = 1 }},
		{name: "only mtime", raw: func(b []byte) { clear(b); b[48] = 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := testInode(7, FormatStream)
			if tc.mutate != nil {
				tc.mutate(&in)
			}
			b := make([]byte, InodeSize)
			EncodeInode(b, in)
			if tc.raw != nil {
				tc.raw(b)
			}
			_, err := DecodeInode(b)
			wantRefusal(t, err, ErrInvalid, "")
		})
	}
	_, err := DecodeInode(make([]byte, InodeSize-1))
	wantRefusal(t, err, ErrSize, "")
}

func TestSummaryRoundTrip(t *testing.T) {
	for _, s := range [][]SummaryEntry{
		{},
		{{FBN: 0, CRC: 0}},
		{{FBN: 1<<64 - 1, CRC: 1<<32 - 1, Dead: true}, {FBN: 5, CRC: 6}, {FBN: 5, CRC: 7, Dead: true}},
	} {
		b := EncodeSummary(s)
		if len(b) != len(s)*SummaryEntrySize {
			t.Fatalf("len = %d", len(b))
		}
		got, err := DecodeSummary(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(s) {
			t.Fatalf("got %d entries, want %d", len(got), len(s))
		}
		for i := range s {
			if got[i] != s[i] {
				t.Fatalf("entry %d = %+v, want %+v", i, got[i], s[i])
			}
		}
	}
	b := EncodeSummary([]SummaryEntry{{FBN: 2, CRC: 0x01020304, Dead: true}})
	want := []byte{2, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1, 1, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("EncodeSummary = % x, want % x", b, want)
	}
}

func TestSummaryRefusals(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"partial entry", make([]byte, 17), ErrSize},
		{"unknown flag", func() []byte { b := make([]byte, 32); b[16+12] = 2; return b }(), ErrInvalid},
		{"high flag", func() []byte { b := make([]byte, 16); b[15] = 0x80; return b }(), ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSummary(tc.b)
			wantRefusal(t, err, tc.want, "")
		})
	}
}

func TestHeadRoundTrip(t *testing.T) {
	for _, hd := range []Head{
		{FileTag: testTag, Inode: testInode(4, FormatStream)},
		{FileTag: 0, Inode: Inode{Format: FormatParted, DataBlockSize: 4096, MetaBlockSize: 4096}},
	} {
		b, err := EncodeHead(hd)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != HeadSize || string(b[:8]) != "CKPTHEAD" || b[10] != byte(hd.Inode.Format) {
			t.Fatalf("bad encoding % x", b)
		}
		got, err := DecodeHead(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.FileTag != hd.FileTag || got.Inode != hd.Inode || got.Embed != nil || got.BlocksKnown {
			t.Fatalf("got %+v, want %+v", got, hd)
		}
	}
	if _, err := EncodeHead(Head{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("EncodeHead of zero inode: %v, want ErrInvalid", err)
	}
}

func resealHead(b []byte) { le.PutUint32(b[124:], Checksum(b[:124])) }

func TestHeadRefusals(t *testing.T) {
	good, err := EncodeHead(Head{FileTag: testTag, Inode: testInode(4, FormatStream)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"short", func(b []byte) []byte { return b[:100] }, ErrSize},
		{"long", func(b []byte) []byte { return append(b, 0) }, ErrSize},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrBadMagic},
		{"newer version", func(b []byte) []byte { b[8] = HeadVersion + 1; resealHead(b); return b }, ErrUnsupported},
		{"version 3 without a lineage", func(b []byte) []byte { b[8] = 3; resealHead(b); return b }, ErrInvalid},
		{"a lineage in a version 2 head", func(b []byte) []byte { b[24+56] = 1; resealHead(b); return b }, ErrInvalid},
		{"version 0", func(b []byte) []byte { b[8] = 0; resealHead(b); return b }, ErrInvalid},
		{"checksum", func(b []byte) []byte { b[30] ^= 1; return b }, ErrChecksum},
		{"reserved 11", func(b []byte) []byte { b[11] = 1; resealHead(b); return b }, ErrInvalid},
		{"reserved 104", func(b []byte) []byte { b[104] = 1; resealHead(b); return b }, ErrInvalid},
		{"format mismatch", func(b []byte) []byte { b[10] = 1; resealHead(b); return b }, ErrFormat},
		{"no inode", func(b []byte) []byte { clear(b[24:104]); resealHead(b); return b }, ErrInvalid},
		{"bad inode", func(b []byte) []byte { b[24+17] = 99; resealHead(b); return b }, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHead(tc.mutate(bytes.Clone(good)))
			wantRefusal(t, err, tc.want, "")
		})
	}
}

// testHeader is a valid part-0 header.
func testHeader(f Format) Header {
	in := testInode(7, f)
	base := testInode(5, f)
	return Header{
		Layout:  Layout{Format: f, DataBlockSize: testDBS, MetaBlockSize: testMBS, DataBlocks: 3, MetaBlocks: 2},
		Name:    ObjectName{Cno: 7},
		FileTag: testTag,
		Base:    base,
		Inode:   in,
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	part2 := testHeader(FormatStream)
	part2.Name.Part = 2
	part2.Base, part2.Inode = Inode{}, Inode{}
	newFile := testHeader(FormatParted)
	newFile.Base = Inode{}
	empty := testHeader(FormatParted)
	empty.DataBlocks, empty.MetaBlocks = 0, 0
	for _, h := range []Header{testHeader(FormatStream), testHeader(FormatParted), part2, newFile, empty} {
		b, err := EncodeHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != HeaderSize {
			t.Fatalf("len %d", len(b))
		}
		got, err := DecodeHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if got != h {
			t.Fatalf("got %+v\nwant %+v", got, h)
		}
		if got.HasInode() != (h.Name.Part == 0) {
			t.Fatalf("HasInode = %v for part %d", got.HasInode(), h.Name.Part)
		}
	}
}

func TestHeaderLayoutBytes(t *testing.T) {
	h := testHeader(FormatStream)
	b, err := EncodeHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		off  int
		want []byte
	}{
		{0, []byte("CKPTSEG1")},
		{8, []byte{1, 0}},
		{10, []byte{2}},
		{11, []byte{1}},
		{12, []byte{0, 0, 0, 0}},
		{16, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
		{24, []byte{0, 0x10, 0, 0}},
		{28, []byte{0, 2, 0, 0}},
		{32, []byte{3, 0, 0, 0}},
		{36, []byte{2, 0, 0, 0}},
		{48, []byte{5, 0, 0, 0, 0, 0, 0, 0}},
		{128, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
		{208, make([]byte, 44)},
	}
	for _, c := range checks {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("bytes at %d = % x, want % x", c.off, got, c.want)
		}
	}
	if got := le.Uint64(b[40:]); got != testTag {
		t.Errorf("file tag %#x", got)
	}
	if got := le.Uint32(b[252:]); got != Checksum(b[:252]) {
		t.Errorf("crc %#x", got)
	}
}

func resealHeader(b []byte) { le.PutUint32(b[hOffCRC:], Checksum(b[:hOffCRC])) }

func TestHeaderRefusals(t *testing.T) {
	good, err := EncodeHeader(testHeader(FormatStream))
	if err != nil {
		t.Fatal(err)
	}
	u32 := func(off int, v uint32) func(b []byte) { return func(b []byte) { le.PutUint32(b[off:], v) } }
	u64 := func(off int, v uint64) func(b []byte) { return func(b []byte) { le.PutUint64(b[off:], v) } }
	tests := []struct {
		name   string
		mutate func(b []byte)
		reseal bool
		want   error
	}{
		{"magic", func(b []byte) { b[7] = '2' }, false, ErrBadMagic},
		{"newer version", func(b []byte) { b[8] = 7 }, false, ErrUnsupported},
		{"version 0", func(b []byte) { b[8] = 0 }, true, ErrInvalid},
		{"checksum of a field", func(b []byte) { b[hOffCno] ^= 2 }, false, ErrChecksum},
		{"checksum itself", func(b []byte) { b[hOffCRC] ^= 1 }, false, ErrChecksum},
		{"unknown flag", func(b []byte) { b[hOffFlags] |= 4 }, true, ErrInvalid},
		{"reserved", func(b []byte) { b[hOffReserved+10] = 1 }, true, ErrInvalid},
		{"format 0", func(b []byte) { b[hOffFormat] = 0 }, true, ErrInvalid},
		{"format 3", func(b []byte) { b[hOffFormat] = 3 }, true, ErrInvalid},
		{"data block size", u32(hOffDBS, 3000), true, ErrInvalid},
		{"meta block size", u32(hOffMBS, 128), true, ErrInvalid},
		{"over 1 GiB", u32(hOffN, 1<<18), true, ErrSize},
		{"cno 0", u64(hOffCno, 0), true, ErrInvalid},
		{"part 0 without inode", func(b []byte) { b[hOffFlags] = 0; clear(b[hOffInode : hOffInode+InodeSize]) }, true, ErrInvalid},
		{"flag without inode", func(b []byte) { clear(b[hOffInode : hOffInode+InodeSize]) }, true, ErrInvalid},
		{"inode without flag", func(b []byte) { b[hOffFlags] = 0 }, true, ErrInvalid},
		{"inode in part 1", u32(hOffPart, 1), true, ErrInvalid},
		{"base in part 1", func(b []byte) {
			le.PutUint32(b[hOffPart:], 1)
			b[hOffFlags] = 0
			clear(b[hOffInode : hOffInode+InodeSize])
		}, true, ErrInvalid},
		{"inode of another checkpoint", u64(hOffInode, 8), true, ErrInvalid},
		{"inode of another format", func(b []byte) { b[hOffInode+16] = 1 }, true, ErrInvalid},
		{"inode of other block size", u32(hOffInode+20, 8192), true, ErrInvalid},
		{"inode of other meta size", u32(hOffInode+24, 1024), true, ErrInvalid},
		{"inode of 0 parts", u32(hOffInode+28, 0), true, ErrInvalid},
		{"inode height", func(b []byte) { b[hOffInode+17] = 33 }, true, ErrInvalid},
		{"inode root zero", func(b []byte) { clear(b[hOffInode+32 : hOffInode+48]) }, true, ErrInvalid},
		{"inode reserved", func(b []byte) { b[hOffInode+60] = 1 }, true, ErrInvalid},
		{"base of a later checkpoint", u64(hOffBase, 7), true, ErrInvalid},
		{"base of another format", func(b []byte) { b[hOffBase+16] = 1 }, true, ErrInvalid},
		{"base of other block size", u32(hOffBase+20, 8192), true, ErrInvalid},
		{"base invalid", func(b []byte) { b[hOffBase+17] = 0 }, true, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(good)
			tc.mutate(b)
			if tc.reseal {
				resealHeader(b)
			}
			_, err := DecodeHeader(b)
			wantRefusal(t, err, tc.want, "")
		})
	}
	for _, n := range []int{0, 255, 257} {
		_, err := DecodeHeader(make([]byte, n))
		wantRefusal(t, err, ErrSize, "")
	}
}

func TestUnsupportedMessage(t *testing.T) {
	b, err := EncodeHeader(testHeader(FormatStream))
	if err != nil {
		t.Fatal(err)
	}
	b[8] = 7
	_, err = DecodeHeader(b)
	err = withKey(err, "f/x/0000000003.0")
	const want = "object f/x/0000000003.0 has layout version 7; this build reads up to 2"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Version != 7 || ue.Supported != LayoutVersion {
		t.Fatalf("errors.As UnsupportedError: %+v", ue)
	}
}

func TestEncodeHeaderRefusesWhatReadersRefuse(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(h *Header)
	}{
		{"part 0 without inode", func(h *Header) { h.Inode = Inode{} }},
		{"part 1 with inode", func(h *Header) { h.Name.Part = 1 }},
		{"cno 0", func(h *Header) { h.Name.Cno = 0 }},
		{"bad block size", func(h *Header) { h.DataBlockSize = 100 }},
		{"inode mismatch", func(h *Header) { h.Inode.Cno = 9 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeader(FormatParted)
			tc.mutate(&h)
			if _, err := EncodeHeader(h); !errors.Is(err, ErrInvalid) {
				t.Fatalf("EncodeHeader: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestLayoutOffsets(t *testing.T) {
	l := Layout{Format: FormatStream, DataBlockSize: 4096, MetaBlockSize: 512, DataBlocks: 3, MetaBlocks: 2}
	p := l
	p.Format = FormatParted
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"stream data 0", l.DataOffset(0), 0},
		{"stream data 2", l.DataOffset(2), 8192},
		{"stream meta 0", l.MetaOffset(0), 12288},
		{"stream meta 1", l.MetaOffset(1), 12800},
		{"stream summary", l.SummaryOffset(), 13312},
		{"stream header", l.HeaderOffset(), 13312 + 48},
		{"stream size", l.Size(), 13312 + 48 + 256},
		{"parted data 0", p.DataOffset(0), 256},
		{"parted data 2", p.DataOffset(2), 256 + 8192},
		{"parted meta 0", p.MetaOffset(0), 256 + 12288},
		{"parted summary", p.SummaryOffset(), 256 + 13312},
		{"parted header", p.HeaderOffset(), 0},
		{"parted size", p.Size(), 13312 + 48 + 256},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if r := p.DataRange(1, 2); r.Off != 256+4096 || r.Len != 8192 {
		t.Errorf("DataRange = %+v", r)
	}
	if r := l.MetaRange(); r.Off != 12288 || r.Len != 1024 {
		t.Errorf("MetaRange = %+v", r)
	}
	if r := l.SummaryRange(); r.Off != 13312 || r.Len != 48 {
		t.Errorf("SummaryRange = %+v", r)
	}
}
