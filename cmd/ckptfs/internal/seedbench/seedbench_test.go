package seedbench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/link"
)

// The smoke tests run every table at a tiny size without a link and check
// that the rows are sane: counts and sizes, never durations.

const tinySize = 24 * MiB

func TestBuysRowsSane(t *testing.T) {
	ctx := context.Background()
	variants := []Variant{Parted, Stream(4 * MiB), Stream(GiB)}
	rows, err := Buys(ctx, BuysConfig{Size: tinySize, Rates: []float64{0}, Profiles: []link.Profile{link.ProfileNone}, Variants: variants})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(variants) {
		t.Fatalf("got %d rows, want %d", len(rows), len(variants))
	}
	for _, r := range rows {
		t.Run(r.Variant.Name, func(t *testing.T) {
			if r.Kept != tinySize {
				t.Errorf("kept %d bytes, want %d", r.Kept, tinySize)
			}
			if r.Objects < 1 {
				t.Errorf("%d objects, want at least part 0", r.Objects)
			}
			if r.Uploaded < tinySize {
				t.Errorf("uploaded %d bytes, less than the %d kept", r.Uploaded, tinySize)
			}
			tm := r.Timing
			if got := tm.StreamSentBytes + tm.StreamFlushBytes - tm.StreamDeadBytes; got != tinySize {
				t.Errorf("sent ahead %d + by the flush %d - dead %d = %d, want the %d kept",
					tm.StreamSentBytes, tm.StreamFlushBytes, tm.StreamDeadBytes, got, tinySize)
			}
			if r.SeqRequests < 2 {
				t.Errorf("%d sequential requests in the flush, want at least part 0 and the head", r.SeqRequests)
			}
			if r.Variant.Format == segment.FormatParted && tm.StreamSentBytes != 0 {
				t.Errorf("parted sent %d bytes ahead", tm.StreamSentBytes)
			}
		})
	}
	// Small objects sent whole: one per 4 MiB at least, and most data gone
	// before the flush.
	if r := rows[1]; r.Objects < tinySize/(4*MiB) || r.Timing.StreamSentBytes == 0 {
		t.Errorf("stream 4 MiB: %d objects, %d bytes sent ahead; want >= %d objects and some sent ahead",
			r.Objects, r.Timing.StreamSentBytes, tinySize/(4*MiB))
	}
	var buf bytes.Buffer
	BuysMarkdown(&buf, rows)
	for _, v := range variants {
		if !strings.Contains(buf.String(), v.Name) {
			t.Errorf("markdown lacks %q:\n%s", v.Name, buf.String())
		}
	}
}

func TestFlushLimit(t *testing.T) {
	p := BenchParams(Parted)
	tests := []struct {
		name    string
		profile link.Profile
		bytes   int64
		biggest int64
		seq     int
		wantMs  float64
	}{
		{"nothing to send", link.ProfileGeneral, 0, 0, 2, 60},
		{"one piece, one request's bandwidth", link.ProfileGeneral, 9e6, 9e6, 2, 60 + 100},
		{"two requests in parallel", link.ProfileGeneral, 18e6, 9e6, 2, 60 + 100},
		{"many pieces, total bandwidth", link.ProfileGeneral, 450e6, 16 << 20, 4, 120 + 1000},
		{"directory, per-request cap of 8 in flight", link.ProfileDirectory, 800e6, 16 << 20, 4, 12 + 1000},
		{"no link", link.ProfileNone, 1 << 30, 16 << 20, 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := flushLimit(tc.profile, p, tc.bytes, tc.biggest, tc.seq).Seconds() * 1000
			if got < tc.wantMs-0.01 || got > tc.wantMs+0.01 {
				t.Errorf("limit %.3f ms, want %.3f", got, tc.wantMs)
			}
		})
	}
}

func TestSeqRequests(t *testing.T) {
	tests := []struct {
		name    string
		started map[staging.Op]int
		want    int
	}{
		{"parted: create, pieces, complete, head", map[staging.Op]int{staging.OpCreateMultipart: 1, staging.OpUploadPart: 32, staging.OpCompleteMultipart: 1, staging.OpPut: 1}, 4},
		{"pieces: last piece, complete, part 0, head", map[staging.Op]int{staging.OpUploadPart: 1, staging.OpCompleteMultipart: 1, staging.OpPut: 2}, 4},
		{"sent whole: part 0, head", map[staging.Op]int{staging.OpPut: 2}, 2},
		{"data objects, part 0, head", map[staging.Op]int{staging.OpPut: 5}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := seqRequests(tc.started); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestWriterRowsSane(t *testing.T) {
	rows, err := Writer(context.Background(), WriterConfig{Size: tinySize, WriteSize: 8 * MiB, Repeats: 1,
		Variants: []Variant{Parted, Stream(16 * MiB)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("got %d rows, want 2 by value and 2 by reference", len(rows))
	}
	for i, r := range rows {
		if r.ByRef != (i >= 2) {
			t.Errorf("row %d: by reference %v", i, r.ByRef)
		}
		if r.WriteTime <= 0 || r.LongestWrite > r.WriteTime {
			t.Errorf("%s: write time %v, longest write %v", r.Variant.Name, r.WriteTime, r.LongestWrite)
		}
		if r.Kept != tinySize {
			t.Errorf("%s: kept %d, want %d", r.Variant.Name, r.Kept, tinySize)
		}
	}
	for _, i := range []int{1, 3} {
		if rows[i].Timing.StreamSentBytes == 0 {
			t.Errorf("stream 16 MiB (by reference: %v) sent nothing ahead", rows[i].ByRef)
		}
	}
	var buf bytes.Buffer
	WriterMarkdown(&buf, rows, tinySize)
	if strings.Count(buf.String(), "1.00×") != 2 {
		t.Errorf("parted's row is not its own reference:\n%s", buf.String())
	}
}

func TestAmpRowsSane(t *testing.T) {
	const hot = 8 * MiB
	rows, err := Amp(context.Background(), AmpConfig{Size: tinySize, Rate: 1e12, Hots: []int64{64 * MiB, hot},
		Variants: []Variant{Parted, Stream(4 * MiB)}, Profile: link.ProfileNone})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("got %d rows, want 4", len(rows))
	}
	for _, r := range rows {
		if want := min(r.Hot, tinySize); r.Kept != want {
			t.Errorf("%s round %d: kept %d, want %d", r.Variant.Name, r.Hot, r.Kept, want)
		}
		if a := r.Amplification(); a < 1 {
			t.Errorf("%s round %d: amplification %.2f below 1", r.Variant.Name, r.Hot, a)
		}
	}
	// Parted writes the working set once, whatever the rewrites.
	if a := rows[2].Amplification(); a > 1.1 {
		t.Errorf("parted round %d MiB: amplification %.2f, want about 1", hot/MiB, a)
	}
	var buf bytes.Buffer
	AmpMarkdown(&buf, rows)
	if !strings.Contains(buf.String(), "8 MiB") {
		t.Errorf("markdown lacks the working set:\n%s", buf.String())
	}
}

func TestLimitsRowsSane(t *testing.T) {
	rows, err := Limits(context.Background(), LimitsConfig{Size: tinySize, Profiles: []link.Profile{link.ProfileNone},
		Variants: []Variant{Parted, Stream(GiB)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		// The 8 MiB limit writes partial segments of about 9 MiB.
		if r.Objects < 2 {
			t.Errorf("%s: %d objects, want partial segments", r.Variant.Name, r.Objects)
		}
		if r.Timing.StreamSentBytes != 0 {
			t.Errorf("%s: %d bytes sent ahead under the default limits, want none", r.Variant.Name, r.Timing.StreamSentBytes)
		}
	}
	var buf bytes.Buffer
	LimitsMarkdown(&buf, rows)
	if strings.Count(buf.String(), "\n") != 2+len(rows) {
		t.Errorf("want a header and %d rows:\n%s", len(rows), buf.String())
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	tests := []Run{
		{Size: 0, WriteSize: MiB},
		{Size: MiB, WriteSize: 0},
		{Size: MiB, WriteSize: MiB, Rate: -1},
		{Size: 4 * MiB, WriteSize: MiB, Hot: MiB + 1},
	}
	for _, r := range tests {
		if _, err := RunOne(context.Background(), r); err == nil {
			t.Errorf("%+v: no error", r)
		}
	}
}
