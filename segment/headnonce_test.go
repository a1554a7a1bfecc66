package segment

import (
	"bytes"
	"testing"
)

// A head with a nonce is written as version 4 and reads back as written,
// with or without a block count, a lineage or an embed; its bytes differ
// from the same head's without one (the point of the nonce: the ETag of a
// rewrite moves).
func TestHeadNonceRoundTrip(t *testing.T) {
	embedded, _ := embedHead(t, FormatStream)
	lin := testInode(9, FormatStream)
	lin.Lineage = 9
	for _, tc := range []struct {
		name string
		hd   Head
	}{
		{"count unknown", Head{FileTag: testTag, Inode: testInode(9, FormatStream)}},
		{"count known", Head{FileTag: testTag, Inode: testInode(9, FormatParted), BlocksKnown: true, Blocks: 77}},
		{"lineage", Head{FileTag: testTag, Inode: lin, BlocksKnown: true, Blocks: 3}},
		{"embed", embedded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain, err := EncodeHead(tc.hd)
			if err != nil {
				t.Fatal(err)
			}
			hd := tc.hd
			hd.Nonce = 0x0123456789abcdef
			enc, err := EncodeHead(hd)
			if err != nil {
				t.Fatal(err)
			}
			if v := le.Uint16(enc[8:]); v != 4 {
				t.Fatalf("written as version %d, want 4", v)
			}
			if bytes.Equal(enc, plain) {
				t.Fatal("the nonce left the bytes as they were")
			}
			got, err := DecodeHead(enc)
			if err != nil {
				t.Fatal(err)
			}
			if got.Nonce != hd.Nonce || got.Inode != hd.Inode || got.BlocksKnown != hd.BlocksKnown || got.Blocks != hd.Blocks ||
				got.FileTag != hd.FileTag || !bytes.Equal(got.Embed, hd.Embed) {
				t.Fatalf("decoded %+v, want %+v", got, hd)
			}
			hd.Nonce++
			again, err := EncodeHead(hd)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(again, enc) {
				t.Fatal("two nonces, the same bytes")
			}
		})
	}
}

func TestHeadNonceRefusals(t *testing.T) {
	good, err := EncodeHead(Head{FileTag: testTag, Inode: testInode(4, FormatStream), Nonce: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"no nonce", func(b []byte) []byte { clear(b[116:124]); resealHead(b); return b }, ErrInvalid},
		{"unknown flag", func(b []byte) []byte { b[11] |= 2; resealHead(b); return b }, ErrInvalid},
		{"a count said unknown", func(b []byte) []byte { b[104] = 1; resealHead(b); return b }, ErrInvalid},
		{"a nonce in a version 2 head", func(b []byte) []byte { b[8] = 2; b[11] = 0; resealHead(b); return b }, ErrInvalid},
		{"newer version", func(b []byte) []byte { b[8] = 5; resealHead(b); return b }, ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHead(tc.mutate(bytes.Clone(good)))
			wantRefusal(t, err, tc.want, "")
		})
	}
}
