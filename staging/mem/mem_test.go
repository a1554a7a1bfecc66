package mem_test

import (
	"bytes"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

func TestMemContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store { return mem.New() })
}

func TestMemLenBytes(t *testing.T) {
	m := mem.New()
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
	m := mem.New()
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
	m := mem.New()
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

// A completed multipart object keeps its parts: ranges inside one part, across
// parts and the whole object read the same bytes as a concatenation would.
func TestMemMultipartRanges(t *testing.T) {
	ctx := t.Context()
	m := mem.New()
	const ps = staging.MinPartSize
	parts := [][]byte{bytes.Repeat([]byte{1}, ps), bytes.Repeat([]byte{2}, ps), {3, 4, 5}}
	id, err := m.CreateMultipart(ctx, "k", staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var done []staging.CompletedPart
	for i, p := range parts {
		etag, err := m.UploadPart(ctx, "k", id, int32(i+1), p)
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, staging.CompletedPart{Number: int32(i + 1), ETag: etag})
	}
	if _, err := m.CompleteMultipart(ctx, "k", id, done, staging.Conditions{}); err != nil {
		t.Fatal(err)
	}
	whole := bytes.Join(parts, nil)
	size := int64(len(whole))
	for _, c := range []struct {
		r      staging.Range
		off, n int64
	}{
		{staging.Whole(), 0, size},
		{staging.Bytes(10, 20), 10, 20},
		{staging.Bytes(ps-5, 10), ps - 5, 10},
		{staging.Bytes(2*ps-1, 4), 2*ps - 1, 4},
		{staging.Suffix(4), size - 4, 4},
		{staging.Bytes(2*ps+1, 100), 2*ps + 1, 2},
	} {
		got, info, err := m.Get(ctx, "k", c.r)
		if err != nil {
			t.Fatalf("get %+v: %v", c.r, err)
		}
		if info.Size != size || !bytes.Equal(got, whole[c.off:c.off+c.n]) {
			t.Fatalf("get %+v: %d bytes, size %d; want %d bytes from %d", c.r, len(got), info.Size, c.n, c.off)
		}
	}
	if m.Bytes() != size {
		t.Fatalf("Bytes() = %d, want %d", m.Bytes(), size)
	}
}
