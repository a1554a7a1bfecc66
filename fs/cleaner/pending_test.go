package cleaner

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestPendingRoundTrip(t *testing.T) {
	in := map[string]time.Time{
		"0000000001.0":         time.Unix(0, 1_800_000_000_123_456_789),
		"lineage/0000000002":   time.Unix(1_800_000_100, 0),
		strings.Repeat("n", 9): time.Unix(0, 0),
	}
	out, err := DecodePending(EncodePending(in))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(in, out, time.Time.Equal) {
		t.Fatalf("decoded %v; want %v", out, in)
	}
	b := EncodePending(in)
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := DecodePending(c); !errors.Is(err, ErrBadPending) {
			t.Fatalf("byte %d flipped: %v; want ErrBadPending", i, err)
		}
	}
}

// A record that would pass the bound keeps the entries found first: the
// rest are found again by a later run, which only delays their deletion.
func TestPendingBounded(t *testing.T) {
	in := map[string]time.Time{}
	name := strings.Repeat("x", MaxPendingName-8)
	for i := range MaxPendingBytes/MaxPendingName + 100 {
		in[fmt.Sprintf("%s%08d", name, i)] = time.Unix(int64(i), 0)
	}
	b := EncodePending(in)
	if len(b) > MaxPendingBytes {
		t.Fatalf("%d bytes, more than %d", len(b), MaxPendingBytes)
	}
	out, err := DecodePending(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 || len(out) >= len(in) {
		t.Fatalf("%d of %d entries kept", len(out), len(in))
	}
	var newest time.Time
	for _, at := range out {
		if at.After(newest) {
			newest = at
		}
	}
	for n, at := range in {
		if _, ok := out[n]; !ok && at.Before(newest) {
			t.Fatalf("%s, found at %v, left out while one found at %v is kept", n[len(n)-8:], at, newest)
		}
	}
}

func FuzzDecodePending(f *testing.F) {
	f.Add(EncodePending(map[string]time.Time{"0000000001.0": time.Unix(5, 0), "wal/x": time.Unix(0, 7)}))
	f.Add(EncodePending(nil))
	f.Add([]byte(pendingMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodePending(b)
		if err != nil {
			if !errors.Is(err, ErrBadPending) {
				t.Fatalf("error %v is not ErrBadPending", err)
			}
			return
		}
		// What decodes encodes back to the same bytes.
		if again := EncodePending(m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x; decoded from %x", again, b)
		}
	})
}
