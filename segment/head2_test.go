package segment

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// embedInode is the inode of a one-object checkpoint cno.
func embedInode(cno uint64, f Format) Inode {
	in := testInode(cno, f)
	in.Parts = 1
	in.Root = Ptr{Cno: cno, Part: 0, Slot: 0}
	in.Height = 1
	return in
}

// embedHead is a version 2 head embedding part 0 of checkpoint 5.
func embedHead(t testing.TB, f Format) (Head, []byte) {
	t.Helper()
	in := embedInode(5, f)
	base := testInode(4, f)
	var obj []byte
	if f == FormatParted {
		l := Layout{Format: FormatParted, DataBlockSize: testDBS, MetaBlockSize: testMBS, DataBlocks: 1, MetaBlocks: 1}
		h, err := NewHeader(ObjectName{Cno: 5}, testTag, l, &base, &in)
		if err != nil {
			t.Fatal(err)
		}
		obj = make([]byte, h.Size())
		copy(obj[h.DataOffset(0):], testBlock(3))
		if err := h.Seal(obj, []SummaryEntry{{FBN: 3, CRC: Checksum(testBlock(3))}}, testMetas(1)); err != nil {
			t.Fatal(err)
		}
	} else {
		b, err := NewStreamBuilder(ObjectName{Cno: 5}, testTag, testDBS, testMBS)
		if err != nil {
			t.Fatal(err)
		}
		b.Place(3, Checksum(testBlock(3)))
		tail, err := b.Tail(&base, &in, testMetas(1))
		if err != nil {
			t.Fatal(err)
		}
		obj = append(testBlock(3), tail...)
	}
	hd := Head{FileTag: testTag, Inode: in, BlocksKnown: true, Blocks: 1, Embed: obj}
	enc, err := EncodeHead(hd)
	if err != nil {
		t.Fatal(err)
	}
	return hd, enc
}

func TestHeadV2RoundTrip(t *testing.T) {
	for _, f := range []Format{FormatStream, FormatParted} {
		hd, enc := embedHead(t, f)
		if len(enc) != HeadSize+len(hd.Embed) || le.Uint16(enc[8:]) != 2 {
			t.Fatalf("%v: %d bytes, version %d", f, len(enc), le.Uint16(enc[8:]))
		}
		got, err := DecodeHead(enc)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if got.Inode != hd.Inode || !got.BlocksKnown || got.Blocks != 1 || !bytes.Equal(got.Embed, hd.Embed) ||
			got.Part0.Inode != hd.Inode || got.Part0.DataBlocks != 1 || got.Part0.MetaBlocks != 1 {
			t.Fatalf("%v: decoded %+v", f, got)
		}
		// Without an embed, a count alone makes a version 2 head of 128 bytes.
		enc, err = EncodeHead(Head{FileTag: testTag, Inode: testInode(9, f), BlocksKnown: true, Blocks: 77})
		if err != nil {
			t.Fatal(err)
		}
		got, err = DecodeHead(enc)
		if err != nil || len(enc) != HeadSize || le.Uint16(enc[8:]) != 2 || got.Blocks != 77 || !got.BlocksKnown || got.Embed != nil {
			t.Fatalf("%v: count-only head: %d bytes, %+v, %v", f, len(enc), got, err)
		}
	}
	// A version 1 head decodes with the count unknown.
	enc, err := EncodeHead(Head{FileTag: testTag, Inode: testInode(9, FormatStream)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHead(enc)
	if err != nil || le.Uint16(enc[8:]) != 1 || got.BlocksKnown {
		t.Fatalf("version 1 head: %+v, %v", got, err)
	}
}

func TestHeadV2Refusals(t *testing.T) {
	_, good := embedHead(t, FormatStream)
	// reseal recomputes the embed's CRC and the head's.
	reseal := func(b []byte) []byte {
		le.PutUint32(b[112:], Checksum(b[HeadSize:]))
		resealHead(b)
		return b
	}
	cases := []struct {
		name string
		mut  func([]byte) []byte
		want error
	}{
		{"embed byte flipped", func(b []byte) []byte { b[HeadSize+10] ^= 1; return b }, ErrChecksum},
		{"embed cut short", func(b []byte) []byte { return b[:len(b)-1] }, ErrSize},
		{"embed longer than counted", func(b []byte) []byte { return append(b, 0) }, ErrSize},
		{"embed length over the cap", func(b []byte) []byte {
			le.PutUint32(b[12:], MaxEmbedBytes+1)
			resealHead(b)
			return b
		}, ErrSize},
		{"embed checksum without embed", func(b []byte) []byte {
			b = b[:HeadSize]
			le.PutUint32(b[12:], 0)
			resealHead(b)
			return b
		}, ErrInvalid},
		{"reserved 116", func(b []byte) []byte { b[116] = 1; resealHead(b); return b }, ErrInvalid},
		// The embedded object's own header is checked: a valid object of
		// another name, file or checkpoint is refused.
		{"embed header corrupt", func(b []byte) []byte { b[len(b)-1] ^= 1; return reseal(b) }, ErrChecksum},
		{"embed of another checkpoint", func(b []byte) []byte {
			in := embedInode(6, FormatStream)
			EncodeInode(b[24:], in)
			resealHead(b)
			return reseal(b)
		}, ErrWrongObject},
		{"embed for a checkpoint of several parts", func(b []byte) []byte {
			le.PutUint32(b[24+28:], 3)
			return reseal(b)
		}, ErrInvalid},
		{"embed of a file tag not the head's", func(b []byte) []byte {
			le.PutUint64(b[16:], testTag+1)
			return reseal(b)
		}, ErrWrongObject},
		{"embed in the other layout", func(b []byte) []byte {
			in := embedInode(5, FormatParted)
			EncodeInode(b[24:], in)
			b[10] = byte(FormatParted)
			return reseal(b)
		}, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeHead(c.mut(bytes.Clone(good)))
			wantRefusal(t, err, c.want, "")
		})
	}
	// The encoder refuses what the decoder would.
	hd, _ := embedHead(t, FormatStream)
	hd.Embed = bytes.Clone(hd.Embed)
	hd.Embed[0] ^= 1 // a data byte: only the summary's CRC would catch it at read time
	if _, err := EncodeHead(hd); err != nil {
		t.Fatalf("data bytes are checked against the map at read time, not here: %v", err)
	}
	hd.Inode.Parts = 2
	if _, err := EncodeHead(hd); !errors.Is(err, ErrInvalid) {
		t.Fatalf("EncodeHead of an embed for a two-part checkpoint: %v, want ErrInvalid", err)
	}
}

// ReadHead reads a head with its embed in one request, and refuses one past
// the cap without reading more than the cap.
func TestReadHeadV2OneRequest(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: mem.New()}
	hd, enc := embedHead(t, FormatStream)
	put(t, st, prefix+"inode", enc)
	got, _, err := ReadHead(ctx, st, prefix+"inode", testTag)
	if err != nil || !bytes.Equal(got.Embed, hd.Embed) {
		t.Fatalf("ReadHead: %v", err)
	}
	if g := st.take(); len(g) != 1 {
		t.Fatalf("ReadHead made %d requests, want 1", len(g))
	}
	put(t, st, prefix+"inode", make([]byte, MaxHeadObjectBytes+1))
	if _, _, err := ReadHead(ctx, st, prefix+"inode", testTag); !errors.Is(err, staging.ErrTooLarge) {
		t.Fatalf("ReadHead of an object past the cap: %v, want ErrTooLarge", err)
	}
	put(t, st, prefix+"inode", nil)
	_, _, err = ReadHead(ctx, st, prefix+"inode", testTag)
	wantRefusal(t, err, ErrSize, prefix+"inode")
}
