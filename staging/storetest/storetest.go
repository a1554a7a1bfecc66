// Package storetest is the contract every staging.Store backend passes: one
// suite, the same code, run on memory, on a directory and on S3. A backend's
// tests call Run with a constructor; the suite writes only under a prefix
// unique to the run, and deletes what it wrote, so that it can share a bucket
// with other runs.
//
// The suite asserts only what staging.Store documents, never a backend's
// particulars (ETag format, timing, listing page sizes under 1,000).
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// Run runs the contract on stores made by newStore, one per case. newStore
// may return the same shared store each time (a bucket); the suite keeps its
// keys apart.
func Run(t *testing.T, newStore func(t *testing.T) staging.Store) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	root := "storetest/" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:]) + "/"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			prefix := root + c.name + "/"
			t.Cleanup(func() { cleanup(t, s, prefix) })
			c.run(t, s, prefix)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, s staging.Store, p string)
}{
	{"RoundTrip", testRoundTrip},
	{"Overwrite", testOverwrite},
	{"OddCharacters", testOddCharacters},
	{"Ranges", testRanges},
	{"GetLimited", testGetLimited},
	{"IfNoneMatch", testIfNoneMatch},
	{"IfMatch", testIfMatch},
	{"Missing", testMissing},
	{"Delete", testDelete},
	{"List", testList},
	{"Multipart", testMultipart},
	{"MultipartIfNoneMatch", testMultipartIfNoneMatch},
	{"MultipartPartTooSmall", testPartTooSmall},
	{"MultipartAbort", testAbort},
	{"InvalidKeys", testInvalidKeys},
	{"ConcurrentCreate", testConcurrentCreate},
	{"ConcurrentReplace", testConcurrentReplace},
	{"Canceled", testCanceled},
}

// cleanup deletes what a case left under prefix, uploads included.
func cleanup(t *testing.T, s staging.Store, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ups, err := s.ListMultipartUploads(ctx, prefix); err == nil {
		for _, u := range ups {
			_ = s.AbortMultipart(ctx, u.Key, u.UploadID)
		}
	}
	objs, err := staging.ListAll(ctx, s, prefix)
	if err != nil {
		t.Logf("cleanup of %s: %v", prefix, err)
		return
	}
	for _, o := range objs {
		if err := s.Delete(ctx, o.Key); err != nil {
			t.Logf("cleanup of %s: %v", o.Key, err)
		}
	}
}

// pattern returns n bytes that differ with seed and position, so that a
// shifted or mixed-up range cannot compare equal.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>8) ^ seed
	}
	return b
}

func put(t *testing.T, s staging.Store, key string, data []byte, opts staging.PutOptions) staging.ObjectInfo {
	t.Helper()
	info, err := s.Put(t.Context(), key, data, opts)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

func mustGet(t *testing.T, s staging.Store, key string) ([]byte, staging.ObjectInfo) {
	t.Helper()
	data, info, err := s.Get(t.Context(), key, staging.Whole())
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return data, info
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want one matching %v", what, err, want)
	}
}

func testRoundTrip(t *testing.T, s staging.Store, p string) {
	md := map[string]string{"ckptfs-format": "2", "x9": "value with spaces"}
	for _, tc := range []struct {
		name string
		data []byte
		md   map[string]string
	}{
		{"small", pattern(1, 100), md},
		{"empty", []byte{}, nil},
		{"1MiB", pattern(2, 1<<20), md},
	} {
		key := p + tc.name
		in := slices.Clone(tc.data)
		pinfo := put(t, s, key, in, staging.PutOptions{Metadata: tc.md})
		clear(in) // the store must have kept its own copy
		if pinfo.ETag == "" || pinfo.Size != int64(len(tc.data)) || pinfo.Key != key {
			t.Fatalf("%s: put returned %+v", tc.name, pinfo)
		}
		hinfo, err := s.Head(t.Context(), key)
		if err != nil {
			t.Fatalf("head %s: %v", key, err)
		}
		data, ginfo := mustGet(t, s, key)
		if !bytes.Equal(data, tc.data) {
			t.Fatalf("%s: got %d bytes back, not the %d put", tc.name, len(data), len(tc.data))
		}
		for what, info := range map[string]staging.ObjectInfo{"head": hinfo, "get": ginfo} {
			if info.Key != key || info.Size != int64(len(tc.data)) || info.ETag != pinfo.ETag {
				t.Errorf("%s: %s returned %+v, put returned %+v", tc.name, what, info, pinfo)
			}
			if !maps.Equal(info.Metadata, tc.md) {
				t.Errorf("%s: %s metadata %v, want %v", tc.name, what, info.Metadata, tc.md)
			}
			if info.LastModified.IsZero() {
				t.Errorf("%s: %s has no LastModified", tc.name, what)
			}
		}
	}
}

func testOverwrite(t *testing.T, s staging.Store, p string) {
	key := p + "obj"
	first := put(t, s, key, pattern(1, 50), staging.PutOptions{Metadata: map[string]string{"v": "1"}})
	second := put(t, s, key, pattern(2, 70), staging.PutOptions{})
	if first.ETag == second.ETag {
		t.Fatalf("two writes of different bytes have one ETag %s", first.ETag)
	}
	data, info := mustGet(t, s, key)
	if !bytes.Equal(data, pattern(2, 70)) || info.ETag != second.ETag {
		t.Fatalf("after overwrite got %d bytes, ETag %s; want the second write (ETag %s)", len(data), info.ETag, second.ETag)
	}
	if len(info.Metadata) != 0 {
		t.Fatalf("metadata of the first write survived the second: %v", info.Metadata)
	}
}

// testOddCharacters: keys with characters a backend might escape.
func testOddCharacters(t *testing.T, s staging.Store, p string) {
	keys := []string{p + "a~b", p + "a%7Eb", p + "a%b", p + "sp ace/ü/x", p + "..x/.y", p + "q?&=+#", p + "a~meta"}
	for i, k := range keys {
		put(t, s, k, pattern(byte(i), 5), staging.PutOptions{})
	}
	for i, k := range keys {
		if data, info := mustGet(t, s, k); !bytes.Equal(data, pattern(byte(i), 5)) || info.Key != k {
			t.Fatalf("get %q: wrong bytes or key %q", k, info.Key)
		}
	}
	objs, err := staging.ListAll(t.Context(), s, p)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Key)
	}
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("list: %q, want %q", got, want)
	}
}

func testRanges(t *testing.T, s staging.Store, p string) {
	const size = 1000
	key := p + "obj"
	obj := pattern(3, size)
	put(t, s, key, obj, staging.PutOptions{})
	for _, tc := range []struct {
		name   string
		r      staging.Range
		lo, hi int   // expected bytes obj[lo:hi]
		err    error // or this error
	}{
		{"whole", staging.Whole(), 0, size, nil},
		{"middle", staging.Bytes(10, 20), 10, 30, nil},
		{"first byte", staging.Bytes(0, 1), 0, 1, nil},
		{"last byte", staging.Bytes(size-1, 1), size - 1, size, nil},
		{"to the end", staging.Bytes(100, 0), 100, size, nil},
		{"past the end is cut", staging.Bytes(990, 100), 990, size, nil},
		{"start at the end", staging.Bytes(size, 1), 0, 0, staging.ErrInvalidRange},
		{"start past the end", staging.Bytes(5000, 10), 0, 0, staging.ErrInvalidRange},
		{"suffix", staging.Suffix(10), size - 10, size, nil},
		{"suffix of all", staging.Suffix(size), 0, size, nil},
		{"suffix larger than the object", staging.Suffix(5000), 0, size, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, info, err := s.Get(t.Context(), key, tc.r)
			if tc.err != nil {
				wantErr(t, fmt.Sprintf("get %+v", tc.r), err, tc.err)
				return
			}
			if err != nil {
				t.Fatalf("get %+v: %v", tc.r, err)
			}
			if !bytes.Equal(data, obj[tc.lo:tc.hi]) {
				t.Fatalf("get %+v: got %d bytes, want bytes %d..%d", tc.r, len(data), tc.lo, tc.hi)
			}
			if info.Size != size {
				t.Fatalf("get %+v: info.Size %d, want the object's %d", tc.r, info.Size, size)
			}
		})
	}
}

func testIfNoneMatch(t *testing.T, s staging.Store, p string) {
	key := p + "obj"
	create := staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}}
	won, err := s.Put(t.Context(), key, pattern(1, 10), create)
	if err != nil {
		t.Fatalf("first create: %v", err)
	}
	_, err = s.Put(t.Context(), key, pattern(2, 10), create)
	wantErr(t, "second create", err, staging.ErrPrecondition)
	data, info := mustGet(t, s, key)
	if !bytes.Equal(data, pattern(1, 10)) || info.ETag != won.ETag {
		t.Fatalf("the losing create changed the object")
	}
}

func testIfMatch(t *testing.T, s staging.Store, p string) {
	key := p + "obj"
	v1 := put(t, s, key, pattern(1, 10), staging.PutOptions{})
	v2, err := s.Put(t.Context(), key, pattern(2, 10), staging.PutOptions{Conditions: staging.Conditions{IfMatch: v1.ETag}})
	if err != nil {
		t.Fatalf("replace with the current ETag: %v", err)
	}
	if v2.ETag == v1.ETag {
		t.Fatalf("replace kept the ETag %s", v1.ETag)
	}
	_, err = s.Put(t.Context(), key, pattern(3, 10), staging.PutOptions{Conditions: staging.Conditions{IfMatch: v1.ETag}})
	wantErr(t, "replace with a stale ETag", err, staging.ErrPrecondition)
	data, info := mustGet(t, s, key)
	if !bytes.Equal(data, pattern(2, 10)) || info.ETag != v2.ETag {
		t.Fatalf("the losing replace changed the object")
	}
	_, err = s.Put(t.Context(), p+"missing", pattern(4, 10), staging.PutOptions{Conditions: staging.Conditions{IfMatch: v2.ETag}})
	wantErr(t, "replace of a missing key", err, staging.ErrPrecondition)
	if _, err := s.Head(t.Context(), p+"missing"); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("the failed replace of a missing key created it (head: %v)", err)
	}
}

func testMissing(t *testing.T, s staging.Store, p string) {
	_, err := s.Head(t.Context(), p+"missing")
	wantErr(t, "head", err, staging.ErrNotFound)
	_, _, err = s.Get(t.Context(), p+"missing", staging.Whole())
	wantErr(t, "get", err, staging.ErrNotFound)
	_, _, err = s.Get(t.Context(), p+"missing", staging.Suffix(10))
	wantErr(t, "get suffix", err, staging.ErrNotFound)
	// A key that is only a prefix of existing keys is not an object.
	put(t, s, p+"dir/obj", pattern(1, 1), staging.PutOptions{})
	_, err = s.Head(t.Context(), p+"dir")
	wantErr(t, "head of a folder", err, staging.ErrNotFound)
}

func testDelete(t *testing.T, s staging.Store, p string) {
	key := p + "obj"
	put(t, s, key, pattern(1, 10), staging.PutOptions{})
	put(t, s, p+"other", pattern(2, 10), staging.PutOptions{})
	if err := s.Delete(t.Context(), key); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err := s.Head(t.Context(), key)
	wantErr(t, "head after delete", err, staging.ErrNotFound)
	if err := s.Delete(t.Context(), key); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
	if _, err := s.Head(t.Context(), p+"other"); err != nil {
		t.Fatalf("delete removed another key: %v", err)
	}
	// The key can be created again.
	if _, err := s.Put(t.Context(), key, pattern(3, 5), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}}); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
}

func testList(t *testing.T, s staging.Store, p string) {
	const n = 1100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sk/%05d", p, i)
	}
	// Keys around the prefix that must not be listed with it.
	outside := []string{p + "j", p + "k0", p + "l/00001"}
	all := append(slices.Clone(keys), outside...)
	ctx := t.Context()
	work := make(chan string)
	errc := make(chan error, len(all))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range work {
				_, err := s.Put(ctx, k, []byte(k), staging.PutOptions{})
				errc <- err
			}
		})
	}
	for _, k := range all {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("put: %v", err)
		}
	}

	got, err := staging.ListAll(ctx, s, p+"k/")
	if err != nil {
		t.Fatalf("list all: %v", err)
	}
	gotKeys := make([]string, len(got))
	for i, o := range got {
		gotKeys[i] = o.Key
		if o.Size != int64(len(o.Key)) || o.ETag == "" {
			t.Fatalf("listed %+v: want size %d and an ETag", o, len(o.Key))
		}
	}
	if !slices.Equal(gotKeys, keys) {
		t.Fatalf("list all of %d keys returned %d, or out of order", len(keys), len(gotKeys))
	}

	for _, tc := range []struct {
		name       string
		prefix     string
		startAfter string
		max        int
		want       []string
		truncated  bool
	}{
		{"first page", p + "k/", "", 0, keys[:1000], true},
		{"max over 1000", p + "k/", "", 5000, keys[:1000], true},
		{"second page", p + "k/", keys[999], 0, keys[1000:], false},
		{"small page", p + "k/", keys[10], 5, keys[11:16], true},
		{"last small page", p + "k/", keys[n-4], 5, keys[n-3:], false},
		{"start after a key not stored", p + "k/", p + "k/00049x", 3, keys[50:53], true},
		{"start after everything", p + "k/", p + "k/z", 0, nil, false},
		{"start before the prefix", p + "k/", p + "a", 2, keys[:2], true},
		{"prefix inside a segment", p + "k/0010", "", 0, keys[100:110], false},
		{"prefix without slash", p + "k", "", 3, []string{keys[0], keys[1], keys[2]}, true},
		{"prefix of nothing", p + "nothing/", "", 0, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := s.List(ctx, tc.prefix, tc.startAfter, tc.max)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			var got []string
			for _, o := range page.Objects {
				got = append(got, o.Key)
			}
			if !slices.Equal(got, tc.want) || page.Truncated != tc.truncated {
				t.Fatalf("list %q after %q max %d: got %d keys (%s .. %s) truncated %v; want %d keys truncated %v",
					tc.prefix, tc.startAfter, tc.max, len(got), first(got), last(got), page.Truncated, len(tc.want), tc.truncated)
			}
		})
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

func testMultipart(t *testing.T, s staging.Store, p string) {
	ctx := t.Context()
	key := p + "big"
	md := map[string]string{"kind": "multipart"}
	id, err := s.CreateMultipart(ctx, key, staging.PutOptions{Metadata: md})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	ups, err := s.ListMultipartUploads(ctx, p)
	if err != nil {
		t.Fatalf("list uploads: %v", err)
	}
	if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id {
		t.Fatalf("list uploads: %+v, want the one upload %s of %s", ups, id, key)
	}
	sizes := []int{staging.MinPartSize, staging.MinPartSize + 1000, 12345}
	var want []byte
	var parts []staging.CompletedPart
	for i, n := range sizes {
		data := pattern(byte(10+i), n)
		want = append(want, data...)
		num := int32(i + 1)
		etag, err := s.UploadPart(ctx, key, id, num, data)
		if err != nil {
			t.Fatalf("upload part %d: %v", num, err)
		}
		clear(data) // the store must have kept its own copy
		parts = append(parts, staging.CompletedPart{Number: num, ETag: etag})
	}
	if _, err := s.Head(ctx, key); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("the upload is visible before it completes (head: %v)", err)
	}
	info, err := s.CompleteMultipart(ctx, key, id, parts, staging.Conditions{})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	if info.Size != int64(len(want)) || info.ETag == "" {
		t.Fatalf("complete returned %+v, want size %d", info, len(want))
	}
	data, ginfo := mustGet(t, s, key)
	if !bytes.Equal(data, want) {
		t.Fatalf("the object's %d bytes are not the %d bytes of its parts", len(data), len(want))
	}
	if ginfo.ETag != info.ETag || !maps.Equal(ginfo.Metadata, md) {
		t.Fatalf("get returned %+v; complete returned ETag %s and metadata was %v", ginfo, info.ETag, md)
	}
	// A range across the boundary of parts 1 and 2.
	r, _, err := s.Get(ctx, key, staging.Bytes(staging.MinPartSize-5, 10))
	if err != nil || !bytes.Equal(r, want[staging.MinPartSize-5:staging.MinPartSize+5]) {
		t.Fatalf("range across parts: %d bytes, %v", len(r), err)
	}
	ups, err = s.ListMultipartUploads(ctx, p)
	if err != nil || len(ups) != 0 {
		t.Fatalf("uploads after complete: %+v, %v", ups, err)
	}
}

// upload starts an upload of key with one part of data and returns its id
// and parts.
func upload(t *testing.T, s staging.Store, key string, data ...[]byte) (string, []staging.CompletedPart) {
	t.Helper()
	id, err := s.CreateMultipart(t.Context(), key, staging.PutOptions{})
	if err != nil {
		t.Fatalf("create upload of %s: %v", key, err)
	}
	var parts []staging.CompletedPart
	for i, d := range data {
		etag, err := s.UploadPart(t.Context(), key, id, int32(i+1), d)
		if err != nil {
			t.Fatalf("upload part %d of %s: %v", i+1, key, err)
		}
		parts = append(parts, staging.CompletedPart{Number: int32(i + 1), ETag: etag})
	}
	return id, parts
}

func testMultipartIfNoneMatch(t *testing.T, s staging.Store, p string) {
	ctx := t.Context()
	key := p + "obj"
	create := staging.Conditions{IfNoneMatch: true}
	id1, parts1 := upload(t, s, key, pattern(1, 100))
	id2, parts2 := upload(t, s, key, pattern(2, 100))
	if _, err := s.CompleteMultipart(ctx, key, id1, parts1, create); err != nil {
		t.Fatalf("first complete: %v", err)
	}
	_, err := s.CompleteMultipart(ctx, key, id2, parts2, create)
	wantErr(t, "second complete", err, staging.ErrPrecondition)
	data, _ := mustGet(t, s, key)
	if !bytes.Equal(data, pattern(1, 100)) {
		t.Fatalf("the losing complete changed the object")
	}
	// The losing upload stays open until aborted.
	if err := s.AbortMultipart(ctx, key, id2); err != nil {
		t.Fatalf("abort of the losing upload: %v", err)
	}
}

func testPartTooSmall(t *testing.T, s staging.Store, p string) {
	ctx := t.Context()
	key := p + "obj"
	id, parts := upload(t, s, key, pattern(1, 1024), pattern(2, 1024))
	_, err := s.CompleteMultipart(ctx, key, id, parts, staging.Conditions{})
	wantErr(t, "complete with a small first part", err, staging.ErrPartTooSmall)
	if _, err := s.Head(ctx, key); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("a refused upload published its object (head: %v)", err)
	}
	if err := s.AbortMultipart(ctx, key, id); err != nil {
		t.Fatalf("abort: %v", err)
	}
}

func testAbort(t *testing.T, s staging.Store, p string) {
	ctx := t.Context()
	key := p + "obj"
	id, _ := upload(t, s, key, pattern(1, 1000))
	if err := s.AbortMultipart(ctx, key, id); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if _, _, err := s.Get(ctx, key, staging.Whole()); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("get after abort: %v, want ErrNotFound", err)
	}
	objs, err := staging.ListAll(ctx, s, p)
	if err != nil || len(objs) != 0 {
		t.Fatalf("list after abort: %+v, %v", objs, err)
	}
	ups, err := s.ListMultipartUploads(ctx, p)
	if err != nil || len(ups) != 0 {
		t.Fatalf("uploads after abort: %+v, %v", ups, err)
	}
	wantErr(t, "abort of an aborted upload", s.AbortMultipart(ctx, key, id), staging.ErrNotFound)
	_, err = s.UploadPart(ctx, key, id, 2, pattern(2, 10))
	wantErr(t, "upload part of an aborted upload", err, staging.ErrNotFound)
}

func testInvalidKeys(t *testing.T, s staging.Store, p string) {
	ctx := t.Context()
	for _, key := range []string{
		"", "../x", "/abs", "a/../b", "a/./b", "a\x00b", "a//b", "a/", "..", ".",
		staging.ReservedPrefix + "x", string([]byte{0xff, 'a'}), strings.Repeat("a", staging.MaxKeyLen+1),
	} {
		t.Run(fmt.Sprintf("%q", truncate(key)), func(t *testing.T) {
			_, err := s.Put(ctx, key, []byte("x"), staging.PutOptions{})
			wantErr(t, "put", err, staging.ErrInvalidKey)
			_, _, err = s.Get(ctx, key, staging.Whole())
			wantErr(t, "get", err, staging.ErrInvalidKey)
			_, err = s.Head(ctx, key)
			wantErr(t, "head", err, staging.ErrInvalidKey)
			wantErr(t, "delete", s.Delete(ctx, key), staging.ErrInvalidKey)
			_, err = s.CreateMultipart(ctx, key, staging.PutOptions{})
			wantErr(t, "create upload", err, staging.ErrInvalidKey)
		})
	}
	// Nothing was written anywhere under the run's prefix by the refusals.
	objs, err := staging.ListAll(ctx, s, p)
	if err != nil || len(objs) != 0 {
		t.Fatalf("list: %+v, %v", objs, err)
	}
	_, err = s.Put(ctx, p+"obj", nil, staging.PutOptions{Metadata: map[string]string{"Upper": "x"}})
	wantErr(t, "put with an upper-case metadata key", err, staging.ErrInvalidKey)
}

func truncate(s string) string {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

func testConcurrentCreate(t *testing.T, s staging.Store, p string) {
	const writers = 8
	ctx := t.Context()
	for round := range 3 {
		key := fmt.Sprintf("%sobj%d", p, round)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				<-start
				_, errs[w] = s.Put(ctx, key, pattern(byte(w), 1000), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
			})
		}
		close(start)
		wg.Wait()
		winner := checkOneWinner(t, errs)
		data, _ := mustGet(t, s, key)
		if !bytes.Equal(data, pattern(byte(winner), 1000)) {
			t.Fatalf("round %d: writer %d won but the object holds other bytes", round, winner)
		}
	}
}

func testConcurrentReplace(t *testing.T, s staging.Store, p string) {
	const writers = 8
	ctx := t.Context()
	key := p + "obj"
	cur := put(t, s, key, pattern(100, 1000), staging.PutOptions{})
	for round := range 3 {
		errs := make([]error, writers)
		infos := make([]staging.ObjectInfo, writers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				<-start
				// Bytes differ in every round: S3's ETag is the MD5 of the
				// content, so rewriting equal bytes would keep the ETag.
				infos[w], errs[w] = s.Put(ctx, key, pattern(byte(round*writers+w+1), 1000), staging.PutOptions{Conditions: staging.Conditions{IfMatch: cur.ETag}})
			})
		}
		close(start)
		wg.Wait()
		winner := checkOneWinner(t, errs)
		data, info := mustGet(t, s, key)
		if !bytes.Equal(data, pattern(byte(round*writers+winner+1), 1000)) || info.ETag != infos[winner].ETag {
			t.Fatalf("round %d: writer %d won but the object holds other bytes", round, winner)
		}
		cur = info
	}
}

// checkOneWinner checks that exactly one error is nil and every other is
// ErrPrecondition, and returns the winner's index.
func checkOneWinner(t *testing.T, errs []error) int {
	t.Helper()
	winner := -1
	for w, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both won", winner, w)
		case err == nil:
			winner = w
		case !errors.Is(err, staging.ErrPrecondition):
			t.Fatalf("writer %d: %v, want ErrPrecondition", w, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won")
	}
	return winner
}

func testCanceled(t *testing.T, s staging.Store, p string) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Put(ctx, p+"obj", []byte("x"), staging.PutOptions{})
	wantErr(t, "put with a canceled context", err, context.Canceled)
	if _, err := s.Head(t.Context(), p+"obj"); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("a canceled put stored its object (head: %v)", err)
	}
	_, _, err = s.Get(ctx, p+"obj", staging.Whole())
	wantErr(t, "get with a canceled context", err, context.Canceled)
}

// testGetLimited: staging.GetLimited reads whole an object within its limit,
// in one read or two (past its first 64 KiB), empty ones too, and refuses
// one over it with ErrTooLarge, naming the key.
func testGetLimited(t *testing.T, s staging.Store, p string) {
	const limit = 100 << 10
	for _, n := range []int{0, 1, 1000, 64 << 10, 64<<10 + 1, limit} {
		key := p + fmt.Sprintf("ok-%d", n)
		obj := pattern(byte(n), n)
		w := put(t, s, key, obj, staging.PutOptions{Metadata: map[string]string{"n": fmt.Sprint(n)}})
		data, info, err := staging.GetLimited(t.Context(), s, key, limit)
		if err != nil {
			t.Fatalf("%d bytes with a limit of %d: %v", n, limit, err)
		}
		if !bytes.Equal(data, obj) || info.Size != int64(n) || info.ETag != w.ETag || info.Metadata["n"] != fmt.Sprint(n) {
			t.Fatalf("%d bytes: got %d bytes, info %+v; wrote ETag %s", n, len(data), info, w.ETag)
		}
	}
	for _, n := range []int{limit + 1, 2 * limit} {
		key := p + fmt.Sprintf("over-%d", n)
		put(t, s, key, pattern(7, n), staging.PutOptions{})
		_, _, err := staging.GetLimited(t.Context(), s, key, limit)
		wantErr(t, fmt.Sprintf("%d bytes with a limit of %d", n, limit), err, staging.ErrTooLarge)
		if !strings.Contains(err.Error(), key) {
			t.Fatalf("error %q does not name the key", err)
		}
	}
	if _, _, err := staging.GetLimited(t.Context(), s, p+"missing", limit); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("missing key: %v, want ErrNotFound", err)
	}
}
