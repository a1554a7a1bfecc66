package dir_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
)

// part returns n bytes of a pattern that differs by seed.
func part(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		page := b[i:min(i+4096, n)]
		for j := range page {
			page[j] = seed + byte(i/4096)
		}
	}
	return b
}

// dataInode is the inode of the data file of key's object.
func dataInode(t *testing.T, root, key string) uint64 {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(root, key) + "~*")
	for _, f := range m {
		if strings.HasSuffix(f, "~meta") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	t.Fatalf("no data file for %s in %v", key, m)
	return 0
}

func uploadDataInode(t *testing.T, root, id string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, staging.ReservedPrefix, "uploads", id, "data"), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// A complete of parts written in place in order links the upload's data as
// the object (no copy), whatever order the parts came in; every other
// complete copies, and every one reads back exactly the parts it named.
func TestMultipartInPlace(t *testing.T) {
	const S = staging.MinPartSize
	type up struct {
		n    int32
		seed byte
		size int
	}
	for _, tc := range []struct {
		name     string
		uploads  []up
		complete []int // indexes into uploads, in the object's order
		linked   bool
	}{
		{"in order", []up{{1, 1, S}, {2, 2, S}, {3, 3, 1000}}, []int{0, 1, 2}, true},
		{"out of order", []up{{2, 2, S}, {3, 3, 1000}, {1, 1, S}}, []int{2, 0, 1}, true},
		{"one part", []up{{1, 1, S + 7}}, []int{0}, true},
		{"short part first: no stride yet", []up{{3, 3, 1000}, {1, 1, S}, {2, 2, S}}, []int{1, 2, 0}, false},
		{"a gap in the numbers", []up{{1, 1, S}, {3, 3, S}}, []int{0, 1}, false},
		{"a part in place past the last named", []up{{1, 1, S}, {2, 2, S}, {3, 3, S}}, []int{0, 1}, false},
		{"a middle part short of the stride", []up{{1, 1, S + 10}, {2, 2, S}, {3, 3, 10}}, []int{0, 1, 2}, false},
		{"a part longer than the stride", []up{{1, 1, S}, {2, 2, S + 1}}, []int{0, 1}, false},
		{"a place written twice", []up{{1, 1, S}, {2, 2, S}, {2, 9, S}}, []int{0, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			d, err := dir.NewWith(root, dir.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const key = "a/obj"
			id, err := d.CreateMultipart(ctx, key, staging.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			etags := make([]string, len(tc.uploads))
			for i, u := range tc.uploads {
				if etags[i], err = d.UploadPart(ctx, key, id, u.n, part(u.seed, u.size)); err != nil {
					t.Fatal(err)
				}
			}
			var parts []staging.CompletedPart
			var want []byte
			for _, i := range tc.complete {
				u := tc.uploads[i]
				parts = append(parts, staging.CompletedPart{Number: u.n, ETag: etags[i]})
				want = append(want, part(u.seed, u.size)...)
			}
			var before uint64
			if _, err := os.Stat(filepath.Join(root, staging.ReservedPrefix, "uploads", id, "data")); err == nil {
				before = uploadDataInode(t, root, id)
			}
			info, err := d.CompleteMultipart(ctx, key, id, parts, staging.Conditions{})
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != int64(len(want)) {
				t.Errorf("size %d, want %d", info.Size, len(want))
			}
			got, _, err := d.Get(ctx, key, staging.Range{})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes, not the %d bytes of the parts named", len(got), len(want))
			}
			if linked := before != 0 && dataInode(t, root, key) == before; linked != tc.linked {
				t.Errorf("linked %v, want %v", linked, tc.linked)
			}
			if _, err := os.Stat(filepath.Join(root, staging.ReservedPrefix, "uploads", id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("upload folder left: %v", err)
			}
		})
	}
}

// A part written again with the number of one in place replaces it: the
// old ETag no longer completes, the new one does.
func TestMultipartInPlaceReplaced(t *testing.T) {
	d, err := dir.NewWith(t.TempDir(), dir.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, _ := d.CreateMultipart(ctx, "k", staging.PutOptions{})
	old, err := d.UploadPart(ctx, "k", id, 1, part(1, staging.MinPartSize))
	if err != nil {
		t.Fatal(err)
	}
	now, err := d.UploadPart(ctx, "k", id, 1, part(5, 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CompleteMultipart(ctx, "k", id, []staging.CompletedPart{{Number: 1, ETag: old}}, staging.Conditions{}); err == nil {
		t.Fatal("completed with the ETag of a replaced part")
	}
	if _, err := d.CompleteMultipart(ctx, "k", id, []staging.CompletedPart{{Number: 1, ETag: now}}, staging.Conditions{}); err != nil {
		t.Fatal(err)
	}
	got, _, _ := d.Get(ctx, "k", staging.Range{})
	if !bytes.Equal(got, part(5, 100)) {
		t.Fatalf("read %d bytes, not the replacement", len(got))
	}
}

// A complete that fails its condition leaves the upload whole: completed
// again without it, it reads back exactly; and a part written after a
// complete changes nothing of the object.
func TestMultipartInPlaceAfterComplete(t *testing.T) {
	d, err := dir.NewWith(t.TempDir(), dir.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := d.Put(ctx, "k", []byte("there"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id, _ := d.CreateMultipart(ctx, "k", staging.PutOptions{})
	var parts []staging.CompletedPart
	var want []byte
	for n := int32(1); n <= 3; n++ {
		b := part(byte(n), staging.MinPartSize)
		e, err := d.UploadPart(ctx, "k", id, n, b)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, staging.CompletedPart{Number: n, ETag: e})
		want = append(want, b...)
	}
	if _, err := d.CompleteMultipart(ctx, "k", id, parts, staging.Conditions{IfNoneMatch: true}); !errors.Is(err, staging.ErrPrecondition) {
		t.Fatalf("complete over an object with If-None-Match: %v", err)
	}
	if _, err := d.CompleteMultipart(ctx, "k", id, parts, staging.Conditions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.UploadPart(ctx, "k", id, 3, part(9, staging.MinPartSize)); !errors.Is(err, staging.ErrNotFound) {
		t.Errorf("a part after the complete: %v, want ErrNotFound", err)
	}
	got, _, _ := d.Get(ctx, "k", staging.Range{})
	if !bytes.Equal(got, want) {
		t.Fatal("the object is not the parts completed")
	}
}

// Parts written at once, in place, make the object they name.
func TestMultipartInPlaceConcurrent(t *testing.T) {
	root := t.TempDir()
	d, err := dir.NewWith(root, dir.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, _ := d.CreateMultipart(ctx, "k", staging.PutOptions{})
	// The stride is set first, as a sequential writer's first piece does.
	e1, err := d.UploadPart(ctx, "k", id, 1, part(1, staging.MinPartSize))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	etags := make([]string, n+1)
	etags[1] = e1
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := int32(2); i <= n; i++ {
		wg.Go(func() {
			size := staging.MinPartSize
			if i == n {
				size = 12345
			}
			e, err := d.UploadPart(ctx, "k", id, i, part(byte(i), size))
			etags[i] = e
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var parts []staging.CompletedPart
	var want []byte
	for i := int32(1); i <= n; i++ {
		size := staging.MinPartSize
		if i == n {
			size = 12345
		}
		parts = append(parts, staging.CompletedPart{Number: i, ETag: etags[i]})
		want = append(want, part(byte(i), size)...)
	}
	before := uploadDataInode(t, root, id)
	if _, err := d.CompleteMultipart(ctx, "k", id, parts, staging.Conditions{}); err != nil {
		t.Fatal(err)
	}
	got, _, _ := d.Get(ctx, "k", staging.Range{})
	if !bytes.Equal(got, want) {
		t.Fatal("the object is not its parts")
	}
	if dataInode(t, root, "k") != before {
		t.Error("parts written in place were copied")
	}
}
