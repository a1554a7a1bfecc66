package segment

import (
	"bytes"
	"errors"
	"testing"
)

// streamObject builds a whole stream object of fbns with m meta blocks
// through StreamBuilder, marking slots in dead dead, as pieces of one block.
func streamObject(t testing.TB, name ObjectName, fbns []uint64, dead []uint32, m int, base, inode *Inode) ([]byte, []SummaryEntry) {
	t.Helper()
	b, err := NewStreamBuilder(name, testTag, testDBS, testMBS)
	if err != nil {
		t.Fatal(err)
	}
	var obj []byte
	var sum []SummaryEntry
	for _, fbn := range fbns {
		blk := testBlock(fbn)
		slot := b.Place(fbn, Checksum(blk))
		if got := int64(len(obj)); got != int64(slot)*testDBS || got != b.DataBytes()-testDBS {
			t.Fatalf("slot %d placed at %d", slot, got)
		}
		obj = append(obj, blk...)
		sum = append(sum, SummaryEntry{FBN: fbn, CRC: Checksum(blk)})
	}
	for _, s := range dead {
		if err := b.MarkDead(s); err != nil {
			t.Fatal(err)
		}
		sum[s].Dead = true
	}
	tail, err := b.Tail(base, inode, testMetas(m))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(tail)) != b.TailSize(m) {
		t.Fatalf("tail %d bytes, TailSize %d", len(tail), b.TailSize(m))
	}
	obj = append(obj, tail...)
	if int64(len(obj)) != b.Size(m) {
		t.Fatalf("object %d bytes, Size %d", len(obj), b.Size(m))
	}
	return obj, sum
}

// partedObject builds a whole parted object with Header.Seal.
func partedObject(t testing.TB, name ObjectName, fbns []uint64, m int, base, inode *Inode) ([]byte, []SummaryEntry) {
	t.Helper()
	l := Layout{Format: FormatParted, DataBlockSize: testDBS, MetaBlockSize: testMBS,
		DataBlocks: uint32(len(fbns)), MetaBlocks: uint32(m)}
	h, err := NewHeader(name, testTag, l, base, inode)
	if err != nil {
		t.Fatal(err)
	}
	obj := make([]byte, h.Size())
	var sum []SummaryEntry
	for i, fbn := range fbns {
		blk := testBlock(fbn)
		copy(obj[h.DataOffset(uint32(i)):], blk)
		sum = append(sum, SummaryEntry{FBN: fbn, CRC: Checksum(blk)})
	}
	if err := h.Seal(obj, sum, testMetas(m)); err != nil {
		t.Fatal(err)
	}
	return obj, sum
}

func TestStreamBuilderBytes(t *testing.T) {
	in := testInode(7, FormatStream)
	base := testInode(6, FormatStream)
	obj, sum := streamObject(t, ObjectName{Cno: 7}, []uint64{10, 11, 10}, []uint32{0}, 2, &base, &in)
	l := Layout{Format: FormatStream, DataBlockSize: testDBS, MetaBlockSize: testMBS, DataBlocks: 3, MetaBlocks: 2}
	if int64(len(obj)) != l.Size() {
		t.Fatalf("len %d, want %d", len(obj), l.Size())
	}
	for i, fbn := range []uint64{10, 11, 10} {
		if !bytes.Equal(obj[l.DataOffset(uint32(i)):][:testDBS], testBlock(fbn)) {
			t.Fatalf("slot %d holds other bytes", i)
		}
	}
	for i, m := range testMetas(2) {
		if !bytes.Equal(obj[l.MetaOffset(uint32(i)):][:testMBS], m) {
			t.Fatalf("meta %d holds other bytes", i)
		}
	}
	got, err := DecodeSummary(obj[l.SummaryOffset():][:l.SummaryBytes()])
	if err != nil {
		t.Fatal(err)
	}
	for i := range sum {
		if got[i] != sum[i] {
			t.Fatalf("summary %d = %+v, want %+v", i, got[i], sum[i])
		}
	}
	h, err := DecodeHeader(obj[len(obj)-HeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	if h.Layout != l || h.Inode != in || h.Base != base || h.Name != (ObjectName{Cno: 7}) || h.FileTag != testTag {
		t.Fatalf("header %+v", h)
	}
}

func TestStreamBuilderState(t *testing.T) {
	b, err := NewStreamBuilder(ObjectName{Cno: 3, Part: 1}, testTag, testDBS, testMBS)
	if err != nil {
		t.Fatal(err)
	}
	if b.TailSize(0) != HeaderSize || b.DataBytes() != 0 {
		t.Fatalf("empty builder: tail %d data %d", b.TailSize(0), b.DataBytes())
	}
	for i := range 5 {
		if s := b.Place(uint64(100+i), uint32(i)); s != uint32(i) {
			t.Fatalf("Place %d = slot %d", i, s)
		}
	}
	if err := b.MarkDead(1); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkDead(1); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkDead(5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MarkDead past the end: %v", err)
	}
	if b.DataBlocks() != 5 || b.DeadBlocks() != 1 || b.DataBytes() != 5*testDBS {
		t.Fatalf("blocks %d dead %d bytes %d", b.DataBlocks(), b.DeadBlocks(), b.DataBytes())
	}
	if e, ok := b.Entry(1); !ok || !e.Dead || e.FBN != 101 {
		t.Fatalf("Entry(1) = %+v, %v", e, ok)
	}
	if _, ok := b.Entry(5); ok {
		t.Fatal("Entry past the end")
	}
	if got, want := b.TailSize(3), int64(3*testMBS+5*16+256); got != want {
		t.Fatalf("TailSize = %d, want %d", got, want)
	}
	h, err := b.Header(nil, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if h.Size() != b.Size(3) || h.HasInode() {
		t.Fatalf("header %+v", h)
	}
}

func TestStreamBuilderRefusals(t *testing.T) {
	if _, err := NewStreamBuilder(ObjectName{Cno: 1}, 0, 1000, testMBS); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad data block size: %v", err)
	}
	if _, err := NewStreamBuilder(ObjectName{Cno: 1}, 0, testDBS, 100); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad meta block size: %v", err)
	}
	if _, err := NewStreamBuilder(ObjectName{}, 0, testDBS, testMBS); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cno 0: %v", err)
	}
	in := testInode(3, FormatStream)
	tests := []struct {
		name  string
		part  uint32
		metas [][]byte
		inode *Inode
		want  error
	}{
		{"short meta block", 1, [][]byte{make([]byte, testMBS-1)}, nil, ErrSize},
		{"long meta block", 1, [][]byte{make([]byte, testMBS+1)}, nil, ErrSize},
		{"part 0 without inode", 0, nil, nil, ErrInvalid},
		{"part 1 with inode", 1, nil, &in, ErrInvalid},
		{"inode of another format", 0, nil, func() *Inode { i := testInode(3, FormatParted); return &i }(), ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewStreamBuilder(ObjectName{Cno: 3, Part: tc.part}, testTag, testDBS, testMBS)
			if err != nil {
				t.Fatal(err)
			}
			b.Place(1, 2)
			if _, err := b.Tail(nil, tc.inode, tc.metas); !errors.Is(err, tc.want) {
				t.Fatalf("Tail: %v, want %v", err, tc.want)
			}
		})
	}
	// An object over what a pointer addresses is refused before any buffer
	// is made for it.
	b, err := NewStreamBuilder(ObjectName{Cno: 3, Part: 1}, testTag, MaxDataBlockSize, testMBS)
	if err != nil {
		t.Fatal(err)
	}
	for range MaxObjectBytes / MaxDataBlockSize {
		b.Place(0, 0)
	}
	if _, err := b.Tail(nil, nil, nil); !errors.Is(err, ErrSize) {
		t.Fatalf("Tail over 1 GiB: %v", err)
	}
}

func TestPartedBuild(t *testing.T) {
	in := testInode(4, FormatParted)
	fbns := []uint64{0, 1, 2, 9}
	obj, sum := partedObject(t, ObjectName{Cno: 4}, fbns, 3, nil, &in)
	var data []byte
	for _, f := range fbns {
		data = append(data, testBlock(f)...)
	}
	enc, err := EncodeParted(ObjectName{Cno: 4}, testTag, testDBS, testMBS, nil, &in, data, sum, testMetas(3))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, obj) {
		t.Fatal("EncodeParted and Header.Seal disagree")
	}
	h, err := DecodeHeader(obj[:HeaderSize])
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != FormatParted || h.DataBlocks != 4 || h.MetaBlocks != 3 || h.Size() != int64(len(obj)) {
		t.Fatalf("header %+v", h)
	}
	if !bytes.Equal(obj[h.DataOffset(3):][:testDBS], testBlock(9)) {
		t.Fatal("slot 3 holds other bytes")
	}
	if _, err := EncodeParted(ObjectName{Cno: 4}, testTag, testDBS, testMBS, nil, &in, data[1:], sum, nil); !errors.Is(err, ErrSize) {
		t.Fatalf("short data: %v", err)
	}
	if err := h.Seal(obj[1:], sum, testMetas(3)); !errors.Is(err, ErrSize) {
		t.Fatalf("short buffer: %v", err)
	}
	if err := h.Seal(obj, sum[1:], testMetas(3)); !errors.Is(err, ErrSize) {
		t.Fatalf("short summary: %v", err)
	}
	if err := h.Seal(obj, sum, testMetas(2)); !errors.Is(err, ErrSize) {
		t.Fatalf("missing meta block: %v", err)
	}
}
