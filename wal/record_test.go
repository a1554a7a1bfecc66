package wal

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
)

func TestRecordKey(t *testing.T) {
	for _, tc := range []struct {
		seq  uint64
		want string
	}{
		{1, "p/wal/00000000000000000001"},
		{42, "p/wal/00000000000000000042"},
		{math.MaxUint64, "p/wal/18446744073709551615"},
	} {
		got := RecordKey("p/", tc.seq)
		if got != tc.want {
			t.Errorf("RecordKey(%d) = %q, want %q", tc.seq, got, tc.want)
		}
		if seq, ok := ParseRecordName(strings.TrimPrefix(got, "p/"+Dir)); !ok || seq != tc.seq {
			t.Errorf("ParseRecordName(RecordKey(%d)) = %d, %v", tc.seq, seq, ok)
		}
	}
}

func TestParseRecordName(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  uint64
		ok   bool
	}{
		{"00000000000000000001", 1, true},
		{"00000000000000001234", 1234, true},
		{"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", 0, false}, // overflows
		{"99999999999999999999", 0, false},
		{"00000000000000000000", 0, false}, // no record has seq 0
		{"owner", 0, false},
		{"", 0, false},
		{"0000000000000000001", 0, false},   // 19 digits
		{"000000000000000000001", 0, false}, // 21 digits
		{"0000000000000000000a", 0, false},
		{"+0000000000000000001", 0, false},
		{"-0000000000000000001", 0, false},
		{"00000000000000000001/", 0, false},
		{" 0000000000000000001", 0, false},
	} {
		seq, ok := ParseRecordName(tc.name)
		if seq != tc.seq || ok != tc.ok {
			t.Errorf("ParseRecordName(%q) = %d, %v; want %d, %v", tc.name, seq, ok, tc.seq, tc.ok)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
	}{
		{"empty", nil},
		{"write", []Op{writeOp(4096, "hello, world")}},
		{"empty write", []Op{{Kind: OpWrite, Off: 7, MtimeNs: 3}}},
		{"write with len set", []Op{{Kind: OpWrite, Off: 1, Len: 3, Data: []byte("abc"), MtimeNs: 9}}},
		{"truncate", []Op{{Kind: OpTruncate, Off: 1 << 40, MtimeNs: -5}}},
		{"truncate to zero", []Op{{Kind: OpTruncate, MtimeNs: 1}}},
		{"zero", []Op{{Kind: OpZero, Off: 512, Len: 1 << 20, MtimeNs: 2}}},
		{"mtime", []Op{{Kind: OpMtime, MtimeNs: math.MaxInt64}}},
		{"at the limit", []Op{{Kind: OpZero, Off: MaxOffset - 10, Len: 10}, {Kind: OpTruncate, Off: MaxOffset}}},
		{"every kind", []Op{
			writeOp(0, "abc"),
			{Kind: OpZero, Off: 1, Len: 1, MtimeNs: 10},
			{Kind: OpTruncate, Off: 2, MtimeNs: 11},
			{Kind: OpMtime, MtimeNs: 12},
			writeOp(100, strings.Repeat("x", 5000)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const seq = 77
			b := Encode(testTag, Record{Seq: seq, Ops: tc.ops})
			if len(b) != EncodedSize(tc.ops) {
				t.Fatalf("encoded %d bytes, EncodedSize says %d", len(b), EncodedSize(tc.ops))
			}
			r, err := Decode("k", seq, testTag, b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			want := make([]Op, len(tc.ops))
			for i, op := range tc.ops {
				want[i] = norm(op)
			}
			if r.Seq != seq || !opsEqual(r.Ops, want) {
				t.Fatalf("decoded %+v, want seq %d ops %+v", r, seq, want)
			}
		})
	}
}

// reseal rewrites the trailer so that a test reaches the check after the CRC.
func reseal(b []byte) []byte {
	le.PutUint32(b[len(b)-TrailerSize:], segment.Checksum(b[:len(b)-TrailerSize]))
	return b
}

func TestDecodeRefuses(t *testing.T) {
	const seq = 5
	valid := func() []byte {
		return Encode(testTag, Record{Seq: seq, Ops: []Op{
			writeOp(0, "hello"),
			{Kind: OpTruncate, Off: 3, MtimeNs: 1},
			{Kind: OpZero, Off: 1, Len: 1, MtimeNs: 2},
			{Kind: OpMtime, MtimeNs: 3},
		}})
	}
	// Byte offsets of the ops in valid().
	const (
		op0 = HeaderSize
		op1 = op0 + OpHeaderSize + 5
		op2 = op1 + OpHeaderSize
	)
	for _, tc := range []struct {
		name   string
		mutate func([]byte) []byte
		seq    uint64
		tag    uint64
		reason string
	}{
		{name: "bad magic", mutate: func(b []byte) []byte { b[3] = 'X'; return reseal(b) }, reason: "bad magic"},
		{name: "version", mutate: func(b []byte) []byte { le.PutUint16(b[hdrVersion:], 2); return reseal(b) }, reason: "version 2"},
		{name: "reserved header", mutate: func(b []byte) []byte { b[hdrReserved+1] = 1; return reseal(b) }, reason: "reserved header bytes"},
		{name: "tag", tag: testTag + 1, reason: "file tag"},
		{name: "seq mismatch", seq: seq + 1, reason: "seq 5 in a record named 6"},
		{name: "op reserved", mutate: func(b []byte) []byte { b[op1+7] = 1; return reseal(b) }, reason: "op 1: reserved bytes"},
		{name: "kind 0", mutate: func(b []byte) []byte { b[op2] = 0; return reseal(b) }, reason: "op 2: unknown op kind 0"},
		{name: "kind 5", mutate: func(b []byte) []byte { b[op2] = 5; return reseal(b) }, reason: "op 2: unknown op kind 5"},
		{name: "write len past the end", mutate: func(b []byte) []byte { le.PutUint64(b[op0+opLen:], 1000); return reseal(b) }, reason: "op 0 writes 1000 bytes"},
		{name: "write len negative", mutate: func(b []byte) []byte { le.PutUint64(b[op0+opLen:], math.MaxUint64); return reseal(b) }, reason: "op 0 writes -1 bytes"},
		{name: "truncate with len", mutate: func(b []byte) []byte { le.PutUint64(b[op1+opLen:], 1); return reseal(b) }, reason: "op 1: truncate with len 1"},
		{name: "mtime with off", mutate: func(b []byte) []byte { le.PutUint64(b[op2+OpHeaderSize+opOff:], 1); return reseal(b) }, reason: "op 3: mtime op with off 1"},
		{name: "negative off", mutate: func(b []byte) []byte { le.PutUint64(b[op2+opOff:], math.MaxUint64); return reseal(b) }, reason: "op 2: zero off -1 len 1: negative"},
		{name: "negative zero len", mutate: func(b []byte) []byte { le.PutUint64(b[op2+opLen:], math.MaxUint64); return reseal(b) }, reason: "negative"},
		{name: "past the limit", mutate: func(b []byte) []byte { le.PutUint64(b[op2+opOff:], uint64(MaxOffset)); return reseal(b) }, reason: "past"},
		{name: "count too large", mutate: func(b []byte) []byte { le.PutUint32(b[hdrCount:], math.MaxUint32); return reseal(b) }, reason: "4294967295 ops do not fit"},
		{name: "count one too many", mutate: func(b []byte) []byte { le.PutUint32(b[hdrCount:], 5); return reseal(b) }, reason: "5 ops do not fit in 169 bytes"},
		{name: "count too small", mutate: func(b []byte) []byte { le.PutUint32(b[hdrCount:], 3); return reseal(b) }, reason: "32 bytes after the last op"},
		{name: "trailing bytes", mutate: func(b []byte) []byte { return reseal(append(b, make([]byte, 8)...)) }, reason: "8 bytes after the last op"},
		{name: "truncated in the last op", mutate: func(b []byte) []byte { return b[:len(b)-10] }, reason: "truncated: 4 ops do not fit"},
		{name: "truncated after data", mutate: func([]byte) []byte {
			b := Encode(testTag, Record{Seq: seq, Ops: []Op{writeOp(0, strings.Repeat("d", 100)), {Kind: OpMtime}}})
			return b[:len(b)-20]
		}, reason: "truncated: op 1 of 2 at byte 164"},
		{name: "truncated in data", mutate: func([]byte) []byte {
			b := Encode(testTag, Record{Seq: seq, Ops: []Op{writeOp(0, strings.Repeat("d", 100)), {Kind: OpMtime}}})
			return b[:len(b)-40]
		}, reason: "truncated: op 0 writes 100 bytes, 92 left"},
		{name: "truncated in the header", mutate: func(b []byte) []byte { return b[:20] }, reason: "truncated: 20 bytes"},
		{name: "empty", mutate: func(b []byte) []byte { return nil }, reason: "truncated: 0 bytes"},
		{name: "crc of data", mutate: func(b []byte) []byte { b[op0+OpHeaderSize+2] ^= 1; return b }, reason: "checksum"},
		{name: "crc itself", mutate: func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, reason: "checksum"},
		{name: "field without reseal", mutate: func(b []byte) []byte { b[op2+opMtime] ^= 1; return b }, reason: "checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := valid()
			if tc.mutate != nil {
				b = tc.mutate(b)
			}
			s, tag := uint64(seq), testTag
			if tc.seq != 0 {
				s = tc.seq
			}
			if tc.tag != 0 {
				tag = tc.tag
			}
			const key = "vol/f/abc/wal/00000000000000000005"
			_, err := Decode(key, s, tag, b)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode: %v, want ErrCorrupt", err)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Key != key {
				t.Fatalf("error %v names no key %q", err, key)
			}
			if !strings.HasPrefix(err.Error(), "wal record "+key+": ") || !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("error %q, want the key and %q", err, tc.reason)
			}
		})
	}
	if _, err := Decode("k", seq, testTag, valid()); err != nil {
		t.Fatalf("the valid record is refused: %v", err)
	}
}

func TestDecodeAliases(t *testing.T) {
	b := Encode(testTag, Record{Seq: 1, Ops: []Op{writeOp(0, "abc")}})
	r, err := Decode("k", 1, testTag, b)
	if err != nil {
		t.Fatal(err)
	}
	// Appending to decoded data must not run over the rest of the record.
	if cap(r.Ops[0].Data) != 3 {
		t.Fatalf("data capacity %d, want 3", cap(r.Ops[0].Data))
	}
}

// Every strict prefix of a record (what an upload cut short leaves) is
// refused as truncated; damage that keeps the length is not.
func TestDecodePrefixesAreTruncated(t *testing.T) {
	r := Record{Seq: 7, Ops: []Op{
		{Kind: OpWrite, Off: 10, Data: []byte("0123456789abcdef"), MtimeNs: 1},
		{Kind: OpTruncate, Off: 3, MtimeNs: 2},
		{Kind: OpZero, Off: 1, Len: 2, MtimeNs: 3},
		{Kind: OpWrite, Off: 0, Data: []byte("xyz"), MtimeNs: 4},
	}}
	b := Encode(9, r)
	for n := range len(b) {
		_, err := Decode("k", 7, 9, b[:n])
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d of %d bytes: %v, want ErrTruncated and ErrCorrupt", n, len(b), err)
		}
	}
	flipped := append([]byte(nil), b...)
	flipped[len(flipped)-1] ^= 1
	if _, err := Decode("k", 7, 9, flipped); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated) {
		t.Fatalf("a damaged checksum: %v, want ErrCorrupt and not ErrTruncated", err)
	}
}
