package dir

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// Commit records are read from disk: whatever parses must name a data file
// inside the object's folder, or hold exactly the bytes it says, and nothing
// may panic.
func FuzzParseMeta(f *testing.F) {
	good, _ := json.Marshal(dirMeta{Version: 1, ETag: `"e"`, Size: 3, Modified: time.Unix(1, 0).UTC(), Data: "k~e", Metadata: map[string]string{"a": "b"}})
	held, _ := json.Marshal(dirMeta{Version: 2, ETag: `"e"`, Size: 3, Modified: time.Unix(1, 0).UTC()})
	for _, s := range []string{string(good), string(held) + "\nabc", string(held) + "\nab", string(good) + "\nabc", `{}`,
		`{"v":1,"etag":"x","size":-1,"data":"a~b"}`, `{"v":1,"etag":"x","size":1,"data":"../a~b"}`, `{"v":2}`, `[`,
		`{"v":1,"etag":"x","size":1,"data":"a~b"} {}`, `{"v":2,"etag":"x","size":1,"data":"a~b"}` + "\nx"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, data, err := parseRecord(b, int64(len(b)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if m.Size < 0 || m.ETag == "" {
			t.Fatalf("accepted %+v", m)
		}
		switch m.Version {
		case dirFormatVersion:
			if strings.ContainsAny(m.Data, "/\x00") || m.Data == ".." || !strings.Contains(m.Data, "~") || data != nil {
				t.Fatalf("accepted %+v with %d bytes", m, len(data))
			}
		case dirInlineVersion:
			if m.Data != "" || int64(len(data)) != m.Size || m.Size > inlineMax {
				t.Fatalf("accepted %+v with %d bytes", m, len(data))
			}
		default:
			t.Fatalf("accepted version %d", m.Version)
		}
	})
}

func FuzzParseUpload(f *testing.F) {
	good, _ := json.Marshal(dirUpload{Version: 1, Key: "a/b", Initiated: time.Unix(1, 0).UTC()})
	for _, s := range []string{string(good), `{}`, `{"v":1,"key":"../x"}`, `{"v":1,"key":"a","metadata":{"A":"b"}}`, `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := parseUpload(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if staging.ValidateKey(u.Key) != nil {
			t.Fatalf("accepted key %q", u.Key)
		}
	})
}

// Escaping is reversible and never yields '~' or a path separator.
func FuzzEscapeSeg(f *testing.F) {
	for _, s := range []string{"a", "a~b", "%7E", "%", "~meta", "ü%25~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := escapeSeg(s)
		if strings.Contains(e, "~") {
			t.Fatalf("escape(%q) = %q has '~'", s, e)
		}
		u, ok := unescapeSeg(e)
		if !ok || u != s {
			t.Fatalf("unescape(escape(%q)) = %q, %v", s, u, ok)
		}
	})
}
