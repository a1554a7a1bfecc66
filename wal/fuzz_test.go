package wal

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// The fuzz targets parse what is read from the bucket. The checked-in corpora
// under testdata/fuzz/<Name>/ (valid encodings and damaged ones) run as
// regression cases under plain `go test`.

// The seq and tag every FuzzDecode input is decoded with; the seeds carry them.
const fuzzSeq = 7

func fuzzRecords() []Record {
	return []Record{
		{Seq: fuzzSeq},
		{Seq: fuzzSeq, Ops: []Op{writeOp(0, "hello")}},
		{Seq: fuzzSeq, Ops: []Op{
			writeOp(4096, "abc"),
			{Kind: OpZero, Off: 10, Len: 20, MtimeNs: 1},
			{Kind: OpTruncate, Off: 5, MtimeNs: 2},
			{Kind: OpMtime, MtimeNs: -3},
			{Kind: OpWrite, Off: MaxOffset},
		}},
	}
}

func FuzzDecode(f *testing.F) {
	for _, r := range fuzzRecords() {
		f.Add(Encode(testTag, r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode("k", fuzzSeq, testTag, b)
		if err != nil {
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Key != "k" {
				t.Fatalf("refusal is no *CorruptError naming the key: %v", err)
			}
			return
		}
		if r.Seq != fuzzSeq || EncodedSize(r.Ops) != len(b) {
			t.Fatalf("decoded seq %d, %d encoded bytes, from %d bytes", r.Seq, EncodedSize(r.Ops), len(b))
		}
		for i, op := range r.Ops {
			if why := checkOp(op, int64(len(op.Data))); why != "" {
				t.Fatalf("accepted op %d: %s", i, why)
			}
		}
		if enc := Encode(testTag, r); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b)
		}
	})
}

func FuzzParseOwner(f *testing.F) {
	f.Add(encodeOwner(OwnerInfo{Writer: "0123456789abcdef", Host: "node-1", PID: 4242, Boot: "3f1c", Expires: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}))
	f.Add([]byte(`{"writer":"w","pid":1,"expires":"2030-01-02T04:04:05+01:00","extra":{"a":[1,2]}}`))
	f.Add([]byte(`{"writer":"w","pid":0,"expires":"2030-01-02T04:04:05Z"}`))
	f.Add([]byte(`not json`))
	f.Add(encodeOwner(OwnerInfo{Writer: "w", Host: "h", PID: 2, PIDNS: 4026532000, Start: 81234567, Boot: "b", Expires: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}))
	f.Add([]byte(`{"v":1,"writer":"w","pid":1,"pidns":5,"expires":"2030-01-02T04:04:05Z"}`))
	f.Add([]byte(`{"v":9,"writer":"w","pid":1,"pidns":5,"start":3,"expires":"2030-01-02T04:04:05Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseOwner(b)
		if err != nil {
			return
		}
		if o.Writer == "" || o.PID <= 0 || o.Expires.IsZero() || o.Version < 1 || (o.Version == 1 && o.PIDNS != 0) {
			t.Fatalf("accepted an owner without writer, pid, expiry or version, or a version 1 with a namespace: %+v", o)
		}
		// What a writer writes back parses to the same owner.
		o2, err := parseOwner(encodeOwner(o))
		if err != nil {
			t.Fatalf("re-encoded owner %+v does not parse: %v", o, err)
		}
		if !equalOwner(o, o2) {
			t.Fatalf("owner %+v re-parses as %+v", o, o2)
		}
		// The refusal of Open shows it without trouble.
		if msg := (&BusyError{Key: "p/" + Dir + OwnerName, Owner: o}).Error(); !strings.Contains(msg, "one writer at a time") {
			t.Fatalf("busy message %q", msg)
		}
	})
}
