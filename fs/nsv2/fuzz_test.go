package nsv2

import (
	"reflect"
	"testing"
)

// fuzzCodec fuzzes the decoder of kind with the key it is read from and
// its bytes, seeded with the sample objects of that kind at their keys:
// decoding never panics, and what decodes re-encodes to bytes that decode
// at the same key to the same value.
func fuzzCodec(f *testing.F, kind byte) {
	var c codec
	for _, v := range sampleObjects() {
		if codecOf(v).kind != kind {
			continue
		}
		c = codecOf(v)
		key, err := c.key(v)
		if err != nil {
			f.Fatal(err)
		}
		data, err := c.encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(key, data)
	}
	f.Add("vol/ns2/seal/0000000000000002", []byte("CKN2\x01\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		v, err := c.decode(key, data)
		if err != nil {
			return
		}
		enc, err := c.encode(v)
		if err != nil {
			t.Fatalf("decoded object does not encode: %v", err)
		}
		again, err := c.decode(key, enc)
		if err != nil {
			t.Fatalf("re-encoded object refused: %v", err)
		}
		if !reflect.DeepEqual(v, again) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, v)
		}
	})
}

func FuzzDecodeDentry(f *testing.F)   { fuzzCodec(f, kindDentry) }
func FuzzDecodeInode(f *testing.F)    { fuzzCodec(f, kindInode) }
func FuzzDecodeDecision(f *testing.F) { fuzzCodec(f, kindDecision) }
func FuzzDecodeBatch(f *testing.F)    { fuzzCodec(f, kindBatch) }
func FuzzDecodeLease(f *testing.F)    { fuzzCodec(f, kindLease) }
func FuzzDecodeSeal(f *testing.F)     { fuzzCodec(f, kindSeal) }
func FuzzDecodeDigest(f *testing.F)   { fuzzCodec(f, kindDigest) }
func FuzzDecodeOrphan(f *testing.F)   { fuzzCodec(f, kindOrphan) }
func FuzzDecodeRoot(f *testing.F)     { fuzzCodec(f, kindRoot) }

// FuzzParseKey: parsing never panics, a key parses as one kind at most,
// and the Key function of that kind makes the same key from its parts.
func FuzzParseKey(f *testing.F) {
	for _, key := range validKeys() {
		f.Add(key)
	}
	f.Add("vol/ns2/d/00/0000000000000001/00/%2F")
	f.Fuzz(func(t *testing.T, key string) {
		got := parseAny(key)
		if len(got) > 1 {
			t.Fatalf("%q parsed as %v", key, got)
		}
		for kind, made := range got {
			if made != key {
				t.Fatalf("%q parsed as a %s key, which is made %q", key, kind, made)
			}
		}
	})
}

// FuzzEscapeName: every name escapes to a segment that unescapes to it, and
// every segment that unescapes is the escape of what it unescapes to.
func FuzzEscapeName(f *testing.F) {
	for _, s := range []string{"a", "a b", "%25", "%41", "\xff/\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := UnescapeName(EscapeName(s)); err != nil || got != s {
			t.Fatalf("UnescapeName(EscapeName(%q)) = %q, %v", s, got, err)
		}
		if name, err := UnescapeName(s); err == nil && EscapeName(name) != s {
			t.Fatalf("UnescapeName(%q) = %q, which escapes to %q", s, name, EscapeName(name))
		}
	})
}
