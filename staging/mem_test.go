package staging_test

import (
	"bytes"
	"testing"

	"ckptfs/staging"
	"ckptfs/staging/storetest"
)

func TestMemContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store { return staging.NewMem() })
}

func TestMemLenBytes(t *testing.T) {
	m := staging.NewMem()
	ctx := t.Context()
	steps := []struct {
		name  string
		do    func() error
		len   int
		bytes int64
	}{
		{"put a", func() error { _, err := m.Put(ctx, "a", make([]byte, 10), staging.PutOptions{}); return err }, 1, 10},
		{"put b", func() error { _, err := m.Put(ctx, "b", make([]byte, 5), staging.PutOptions{}); return err }, 2, 15},
		{"replace a", func() error { _, err := m.Put(ctx, "a", make([]byte, 3), staging.PutOptions{}); return err }, 2, 8},
		{"open upload", func() error {
			id, err := m.CreateMultipart(ctx, "c", staging.PutOptions{})
			if err == nil {
				_, err = m.UploadPart(ctx, "c", id, 1, make([]byte, 100))
			}
			return err
		}, 2, 8},
		{"delete b", func() error { return m.Delete(ctx, "b") }, 1, 3},
		{"delete missing", func() error { return m.Delete(ctx, "zz") }, 1, 3},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if m.Len() != s.len || m.Bytes() != s.bytes {
			t.Fatalf("after %s: Len %d Bytes %d, want %d and %d", s.name, m.Len(), m.Bytes(), s.len, s.bytes)
		}
	}
}

// A Get's bytes stay the same when the key is replaced: objects are immutable.
func TestMemGetSurvivesReplace(t *testing.T) {
	m := staging.NewMem()
	ctx := t.Context()
	if _, err := m.Put(ctx, "k", []byte("old bytes"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _, err := m.Get(ctx, "k", staging.Bytes(0, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, "k", []byte("new bytes"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got = append(got, "XYZ"...) // must not write into the stored object
	if !bytes.Equal(got, []byte("oldXYZ")) {
		t.Fatalf("got %q", got)
	}
	all, _, err := m.Get(ctx, "k", staging.Whole())
	if err != nil || string(all) != "new bytes" {
		t.Fatalf("get after replace: %q, %v", all, err)
	}
}

func BenchmarkMemPutGet(b *testing.B) {
	m := staging.NewMem()
	ctx := b.Context()
	data := make([]byte, 16<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := m.Put(ctx, "k", data, staging.PutOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, _, err := m.Get(ctx, "k", staging.Whole()); err != nil {
			b.Fatal(err)
		}
	}
}
