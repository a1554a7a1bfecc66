package storetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// HugeObject makes key an object of size bytes in the directory store at
// root (dir.New(root)), without writing them: its data file is
// sparse, so a test can offer a reader an object of gigabytes for free. It
// writes the store's layout as the dir.Store doc describes it. Keys with
// '%' or '~' (which the layout escapes) are not supported.
func HugeObject(t testing.TB, root, key string, size int64) {
	t.Helper()
	if strings.ContainsAny(key, "%~") {
		t.Fatalf("HugeObject: key %q needs escaping", key)
	}
	dir := filepath.Join(root, filepath.Dir(filepath.FromSlash(key)))
	base := filepath.Base(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	const id = "0123456789abcdef0123456789abcdef"
	data := base + "~" + id
	f, err := os.OpenFile(filepath.Join(dir, data), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(map[string]any{
		"v": 1, "etag": `"` + id + `"`, "size": size,
		"modified": time.Now().UTC().Format(time.RFC3339Nano), "data": data,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, base+"~meta"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
}
