package writermark

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A marker round-trips, and every refusal of Decode is ErrBad.
func TestCodec(t *testing.T) {
	m := Marker{Lo: 42, TTL: 90 * time.Second, Host: "h", PID: 7}
	got, err := Decode(Encode(m))
	if err != nil || got != m {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, m)
	}
	for _, bad := range []string{
		``, `{}`, `[]`, `{"v":2,"lo":1,"ttl_ms":1000}`, `{"v":1,"lo":0,"ttl_ms":1000}`,
		`{"v":1,"lo":1,"ttl_ms":999}`, `{"v":1,"lo":1,"ttl_ms":86400001}`, `{"v":1,"lo":1,"ttl_ms":1000} {}`,
		`{"v":1,"lo":1,"ttl_ms":1000,"host":"` + strings.Repeat("x", 256) + `"}`,
		`{"v":1,"lo":1,"ttl_ms":1000,"pad":"` + strings.Repeat("x", MaxBytes) + `"}`,
	} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrBad) {
			t.Errorf("decode %.60q: %v; want ErrBad", bad, err)
		}
	}
}

// Decode of any bytes refuses them with ErrBad or gives a marker in range
// that re-encodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(Marker{Lo: 3, TTL: DefaultTTL, Host: "host", PID: 1}))
	f.Add([]byte(`{"v":1,"lo":18446744073709551615,"ttl_ms":86400000}`))
	f.Add([]byte(`{"v":1,"lo":1,"ttl_ms":1e3}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("error %v is not ErrBad", err)
			}
			return
		}
		if m.Lo == 0 || m.TTL < time.Second || m.TTL > MaxTTL || len(m.Host) > maxHostBytes {
			t.Fatalf("accepted out of range: %+v", m)
		}
		again, err := Decode(Encode(m))
		if err != nil || again != m {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", m, again, err)
		}
	})
}
