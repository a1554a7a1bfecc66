package segment

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// The fuzz targets decode anything read from the bucket. The checked-in
// corpora under testdata/fuzz/<Name>/ (valid encodings and mutations of them)
// run as regression cases under plain `go test`.

// isRefusal reports whether err is one of the package's refusals.
func isRefusal(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported)
}

func FuzzDecodeHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			if !isRefusal(err) {
				t.Fatalf("error is no refusal: %v", err)
			}
			return
		}
		enc, err := EncodeHeader(h)
		if err != nil {
			t.Fatalf("decoded header does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b)
		}
		// The offsets of a decoded header stay inside the object.
		if h.Size() > MaxObjectBytes || h.HeaderOffset()+HeaderSize > h.Size() || h.SummaryOffset()+h.SummaryBytes() > h.Size() {
			t.Fatalf("layout out of bounds: %+v", h.Layout)
		}
	})
}

func FuzzDecodeSummary(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			if !isRefusal(err) {
				t.Fatalf("error is no refusal: %v", err)
			}
			return
		}
		if enc := EncodeSummary(s); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b)
		}
	})
}

func FuzzDecodeHead(f *testing.F) {
	// Version 2 heads with an embedded part 0 of either layout.
	for _, fm := range []Format{FormatStream, FormatParted} {
		hd, enc := embedHead(f, fm)
		f.Add(enc)
		// Version 4: a nonce, with and without a block count.
		hd.Nonce = 1 << 40
		if enc, err := EncodeHead(hd); err == nil {
			f.Add(enc)
		}
		if enc, err := EncodeHead(Head{FileTag: hd.FileTag, Inode: testInode(3, fm), Nonce: 5}); err == nil {
			f.Add(enc)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hd, err := DecodeHead(b)
		if err != nil {
			if !isRefusal(err) {
				t.Fatalf("error is no refusal: %v", err)
			}
			return
		}
		if len(hd.Embed) > 0 {
			// What a reader serves from the embed lies inside it.
			if hd.Part0.Size() != int64(len(hd.Embed)) || hd.Part0.Inode != hd.Inode {
				t.Fatalf("embed of %d bytes decoded with header %+v", len(hd.Embed), hd.Part0)
			}
		}
		enc, err := EncodeHead(hd)
		if err != nil {
			t.Fatalf("decoded head does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b)
		}
	})
}

func FuzzParseObjectName(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, suffixed, err := ParseObjectName(s)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("error is not ErrBadName: %v", err)
			}
			if IsObjectName(s) {
				t.Fatalf("IsObjectName(%q) but parse failed", s)
			}
			return
		}
		want := n.String()
		if !suffixed {
			want = fmt.Sprintf("%010d", n.Cno)
			if n.Part != 0 {
				t.Fatalf("unsuffixed %q parsed as part %d", s, n.Part)
			}
		}
		if want != s {
			t.Fatalf("%q parsed as %+v, which spells %q", s, n, want)
		}
	})
}
