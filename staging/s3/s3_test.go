package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func TestS3Contract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store { return s3test.NewStore(t) })
}

// TestS3ContractDirectoryListing runs the contract with the listing of
// directory buckets (unordered, no StartAfter, folder prefixes only), which
// the store must sort and filter itself.
func TestS3ContractDirectoryListing(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store {
		c := s3test.Config(t)
		c.DirectoryBucket = true
		return newS3(t, c)
	})
}

func newS3(t testing.TB, c s3.Config) *s3.Store {
	t.Helper()
	s, err := s3.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apiCode is the S3 error code inside err, "" if none.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// TestS3ErrorMapping checks that each S3 answer maps to its sentinel while
// the SDK's error (code, status) stays reachable, and that the message names
// the operation and key.
func TestS3ErrorMapping(t *testing.T) {
	ctx := t.Context()
	s := s3test.NewS3(t)
	obj, err := s.Put(ctx, "obj", []byte("0123456789"), staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7}, 1<<10)
	for _, tc := range []struct {
		name     string
		do       func() error
		sentinel error
		status   int // 0: no HTTP answer expected (refused before sending)
		inMsg    string
	}{
		{"get missing", func() error { _, _, err := s.Get(ctx, "missing", staging.Whole()); return err },
			staging.ErrNotFound, 404, "s3 get missing"},
		{"head missing", func() error { _, err := s.Head(ctx, "missing"); return err },
			staging.ErrNotFound, 404, "s3 head missing"},
		{"range past the end", func() error { _, _, err := s.Get(ctx, "obj", staging.Bytes(10, 1)); return err },
			staging.ErrInvalidRange, 416, "s3 get obj"},
		{"negative range", func() error { _, _, err := s.Get(ctx, "obj", staging.Range{Off: -1}); return err },
			staging.ErrInvalidRange, 0, "s3 get obj"},
		{"if-none-match on existing", func() error {
			_, err := s.Put(ctx, "obj", []byte("x"), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
			return err
		}, staging.ErrPrecondition, 412, "s3 put obj"},
		{"if-match stale", func() error {
			_, err := s.Put(ctx, "obj", []byte("x"), staging.PutOptions{Conditions: staging.Conditions{IfMatch: `"0000"`}})
			return err
		}, staging.ErrPrecondition, 412, "s3 put obj"},
		{"if-match on missing key", func() error {
			_, err := s.Put(ctx, "missing", []byte("x"), staging.PutOptions{Conditions: staging.Conditions{IfMatch: obj.ETag}})
			return err
		}, staging.ErrPrecondition, 404, "s3 put missing"},
		{"abort unknown upload", func() error { return s.AbortMultipart(ctx, "obj", "00000000-0000-0000-0000-000000000000") },
			staging.ErrNotFound, 404, "s3 abort multipart upload"},
		{"upload part of unknown upload", func() error {
			_, err := s.UploadPart(ctx, "obj", "00000000-0000-0000-0000-000000000000", 1, []byte("x"))
			return err
		}, staging.ErrNotFound, 404, "s3 upload part 1 of obj"},
		{"part too small", func() error {
			id, err := s.CreateMultipart(ctx, "small", staging.PutOptions{})
			if err != nil {
				return err
			}
			var parts []staging.CompletedPart
			for n := int32(1); n <= 2; n++ {
				etag, err := s.UploadPart(ctx, "small", id, n, big)
				if err != nil {
					return err
				}
				parts = append(parts, staging.CompletedPart{Number: n, ETag: etag})
			}
			_, err = s.CompleteMultipart(ctx, "small", id, parts, staging.Conditions{})
			return err
		}, staging.ErrPartTooSmall, 400, "s3 complete multipart upload"},
		{"complete if-match on missing key", func() error {
			id, err := s.CreateMultipart(ctx, "missing2", staging.PutOptions{})
			if err != nil {
				return err
			}
			etag, err := s.UploadPart(ctx, "missing2", id, 1, big)
			if err != nil {
				return err
			}
			_, err = s.CompleteMultipart(ctx, "missing2", id, []staging.CompletedPart{{Number: 1, ETag: etag}},
				staging.Conditions{IfMatch: obj.ETag})
			return err
		}, staging.ErrPrecondition, 404, "s3 complete multipart upload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("error %v, want one matching %v", err, tc.sentinel)
			}
			if got := httpStatus(err); got != tc.status {
				t.Errorf("HTTP status %d reachable in the error, want %d (error %v)", got, tc.status, err)
			}
			if tc.status != 0 && apiCode(err) == "" {
				t.Errorf("no smithy.APIError reachable in %v", err)
			}
			if !strings.Contains(err.Error(), tc.inMsg) {
				t.Errorf("error %q does not say %q", err, tc.inMsg)
			}
		})
	}
}

// TestS3MissingBucket: a missing bucket is an error of its own, never
// ErrNotFound, which callers could take for a missing object and answer by
// creating one.
func TestS3MissingBucket(t *testing.T) {
	c := s3test.Config(t)
	c.Bucket = "no-such-bucket-" + strconv.Itoa(len(t.Name()))
	s := newS3(t, c)
	_, _, err := s.Get(t.Context(), "k", staging.Whole())
	if err == nil || errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("get in a missing bucket: %v, want an error that is not ErrNotFound", err)
	}
	if code := apiCode(err); code != "NoSuchBucket" {
		t.Errorf("S3 error code %q, want NoSuchBucket", code)
	}
}

// TestS3Prefix checks that keys get the prefix in the bucket and lose it in
// listings, and that neighbours of the prefix stay out of them.
func TestS3Prefix(t *testing.T) {
	ctx := t.Context()
	root := s3test.Config(t) // a folder of the bucket that is this test's alone
	base := newS3(t, root)
	vc := root
	vc.Prefix += "vol/"
	vol := newS3(t, vc)

	for _, k := range []string{"a", "b/c", "b/d"} {
		if _, err := vol.Put(ctx, k, []byte(k), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Neighbours: same leading bytes, outside the folder. (Not "vol"
	// itself: versitygw's posix backend cannot hold a key and a folder of
	// the same name.)
	for _, k := range []string{"vol.x", "volume/a", "vo"} {
		if _, err := base.Put(ctx, k, []byte(k), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	id, err := vol.CreateMultipart(ctx, "b/up", staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := base.CreateMultipart(ctx, "volume/up", staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}

	keys := func(s staging.Store, prefix string) []string {
		objs, err := staging.ListAll(ctx, s, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for _, o := range objs {
			ks = append(ks, o.Key)
		}
		return ks
	}
	for _, tc := range []struct {
		name   string
		s      staging.Store
		prefix string
		want   []string
	}{
		{"volume, everything", vol, "", []string{"a", "b/c", "b/d"}},
		{"volume, folder", vol, "b/", []string{"b/c", "b/d"}},
		{"volume, inside a segment", vol, "b/d", []string{"b/d"}},
		{"bucket folder", base, "vol/", []string{"vol/a", "vol/b/c", "vol/b/d"}},
		{"bucket, neighbours too", base, "vo", []string{"vo", "vol.x", "vol/a", "vol/b/c", "vol/b/d", "volume/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keys(tc.s, tc.prefix); !slices.Equal(got, tc.want) {
				t.Errorf("keys %q, want %q", got, tc.want)
			}
		})
	}

	// Pages of one key each cross from the volume's last key to nothing.
	var got []string
	after := ""
	for {
		page, err := vol.List(ctx, "", after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) > 1 {
			t.Fatalf("page of %d objects, want at most 1", len(page.Objects))
		}
		for _, o := range page.Objects {
			got = append(got, o.Key)
		}
		if !page.Truncated {
			break
		}
		after = page.Objects[0].Key
	}
	if want := []string{"a", "b/c", "b/d"}; !slices.Equal(got, want) {
		t.Errorf("pages of one: keys %q, want %q", got, want)
	}

	ups, err := vol.ListMultipartUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Key != "b/up" || ups[0].UploadID != id {
		t.Errorf("uploads of the volume %+v, want only b/up %s", ups, id)
	}
	ups, err = base.ListMultipartUploads(ctx, "vol")
	if err != nil {
		t.Fatal(err)
	}
	var upKeys []string
	for _, u := range ups {
		upKeys = append(upKeys, u.Key)
	}
	if want := []string{"vol/b/up", "volume/up"}; !slices.Equal(upKeys, want) {
		t.Errorf("uploads of the bucket folder: %q, want %q", upKeys, want)
	}
	_ = other
}

// TestS3CompleteInfo checks what CompleteMultipart returns, both from the
// store that started the upload and from another one (another process).
func TestS3CompleteInfo(t *testing.T) {
	ctx := t.Context()
	c := s3test.Config(t)
	s1, s2 := newS3(t, c), newS3(t, c)
	md := map[string]string{"ckptfs-kind": "checkpoint"}
	part1 := bytes.Repeat([]byte{1}, staging.MinPartSize)
	part2 := []byte("tail")
	for _, tc := range []struct {
		name     string
		complete *s3.Store
	}{
		{"same store", s1},
		{"other store", s2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "obj-" + strings.ReplaceAll(tc.name, " ", "-")
			id, err := s1.CreateMultipart(ctx, key, staging.PutOptions{Metadata: md})
			if err != nil {
				t.Fatal(err)
			}
			var parts []staging.CompletedPart
			for i, p := range [][]byte{part1, part2} {
				etag, err := s1.UploadPart(ctx, key, id, int32(i+1), p)
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, staging.CompletedPart{Number: int32(i + 1), ETag: etag})
			}
			info, err := tc.complete.CompleteMultipart(ctx, key, id, parts, staging.Conditions{IfNoneMatch: true})
			if err != nil {
				t.Fatal(err)
			}
			head, err := s1.Head(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(len(part1) + len(part2))
			if info.Size != want || head.Size != want {
				t.Errorf("size %d (head %d), want %d", info.Size, head.Size, want)
			}
			if info.ETag != head.ETag || info.ETag == "" {
				t.Errorf("ETag %q, head says %q", info.ETag, head.ETag)
			}
			if info.Metadata["ckptfs-kind"] != "checkpoint" || len(info.Metadata) != 1 {
				t.Errorf("metadata %v, want %v", info.Metadata, md)
			}
			if info.LastModified.IsZero() {
				t.Error("no LastModified")
			}
		})
	}
}

func TestS3KeyTooLongWithPrefix(t *testing.T) {
	s := s3test.NewS3(t)
	key := strings.Repeat("k", staging.MaxKeyLen-len(s.Prefix())+1) // valid alone, too long in the bucket
	_, err := s.Put(t.Context(), key, nil, staging.PutOptions{})
	if !errors.Is(err, staging.ErrInvalidKey) {
		t.Fatalf("put of a key too long with the prefix: %v, want ErrInvalidKey", err)
	}
	if httpStatus(err) != 0 {
		t.Errorf("the request was sent: %v", err)
	}
}

func TestS3Config(t *testing.T) {
	ok := s3.Config{Bucket: "b", Endpoint: "http://127.0.0.1:1", AccessKey: "AKID", SecretKey: "very-secret", SessionToken: "tok"}
	for _, tc := range []struct {
		name string
		edit func(c *s3.Config)
		want string // "" means valid
	}{
		{"valid", func(c *s3.Config) {}, ""},
		{"valid prefix", func(c *s3.Config) { c.Prefix = "vol/1/" }, ""},
		{"no bucket", func(c *s3.Config) { c.Bucket = "" }, "bucket is empty"},
		{"prefix without slash", func(c *s3.Config) { c.Prefix = "vol" }, "does not end with '/'"},
		{"absolute prefix", func(c *s3.Config) { c.Prefix = "/vol/" }, "invalid key"},
		{"dot segment prefix", func(c *s3.Config) { c.Prefix = "a/../" }, "invalid key"},
		{"endpoint without scheme", func(c *s3.Config) { c.Endpoint = "127.0.0.1:7070" }, "not an http"},
		{"secret without access key", func(c *s3.Config) { c.AccessKey = "" }, "both access key and secret key"},
		{"negative connections", func(c *s3.Config) { c.MaxIdleConns = -1 }, "negative"},
		{"every problem at once", func(c *s3.Config) { c.Bucket, c.Prefix = "", "x" }, "bucket is empty\nprefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := s3.New(t.Context(), c)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("NewS3: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("NewS3: %v, want an error saying %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "very-secret") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
	for _, s := range []string{ok.String(), fmt.Sprintf("%v", ok), fmt.Sprintf("%+v", ok), fmt.Sprintf("%#v", ok)} {
		if strings.Contains(s, "very-secret") || strings.Contains(s, "AKID") || strings.Contains(s, "tok}") {
			t.Errorf("printed configuration shows a credential: %s", s)
		}
	}
}

// TestS3OddKeys stores keys whose bytes need escaping in URLs and XML.
func TestS3OddKeys(t *testing.T) {
	ctx := t.Context()
	s := s3test.NewS3(t)
	keys := []string{"sp ace", "plus+sign", "pct%20", "amp&lt;", "q?x=1", "hash#", "ünï/cödé", "tab\tkey", "star*", "tilde~"}
	for _, k := range keys {
		if _, err := s.Put(ctx, k, []byte(k), staging.PutOptions{}); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		data, _, err := s.Get(ctx, k, staging.Whole())
		if err != nil || string(data) != k {
			t.Fatalf("get %q: %q, %v", k, data, err)
		}
	}
	objs, err := staging.ListAll(ctx, s, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Key)
	}
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Errorf("listed %q, want %q", got, want)
	}
}

// fakeS3 is an HTTP server that answers every request with the response
// last set, for tests of how the store reads answers it cannot get from a
// well-behaved server.
type fakeS3 struct {
	url string

	mu           sync.Mutex
	status       int    // GUARDED_BY(mu)
	contentRange string // GUARDED_BY(mu)
	body         []byte // GUARDED_BY(mu)
	// serve, when set, answers instead.
	serve func(w http.ResponseWriter, r *http.Request) // GUARDED_BY(mu)
}

// newFakeS3 starts a fake server, stopped when tb ends, and returns it with
// a store that talks to it.
func newFakeS3(tb testing.TB) (*fakeS3, *s3.Store) {
	f := &fakeS3{status: 200}
	srv := httptest.NewServer(f)
	tb.Cleanup(srv.Close)
	f.url = srv.URL
	return f, f.store(tb, "")
}

// store is a store with prefix on f.
func (f *fakeS3) store(tb testing.TB, prefix string) *s3.Store {
	s, err := s3.New(context.Background(), s3.Config{
		Bucket: "b", Prefix: prefix, Endpoint: f.url, PathStyle: true, AccessKey: "a", SecretKey: "s"})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func (f *fakeS3) set(status int, contentRange string, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.contentRange, f.body = status, contentRange, body
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status, contentRange, body, serve := f.status, f.contentRange, f.body, f.serve
	f.mu.Unlock()
	if serve != nil {
		serve(w, r)
		return
	}
	h := w.Header()
	h.Set("ETag", `"e"`)
	h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if contentRange != "" {
		h.Set("Content-Range", contentRange)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// resolve is the range rule of staging.Range, restated: the offset and
// length r selects in an object of size bytes.
func resolve(r staging.Range, size int64) (off, n int64, ok bool) {
	switch {
	case r.Off < 0 || r.Len < 0 || r.Suffix < 0:
		return 0, 0, false
	case r.Suffix > 0:
		if size == 0 {
			return 0, 0, false
		}
		n = min(r.Suffix, size)
		return size - n, n, true
	case r.Off == 0 && r.Len == 0:
		return 0, size, true
	case r.Off >= size:
		return 0, 0, false
	case r.Len == 0 || r.Len > size-r.Off:
		return r.Off, size - r.Off, true
	}
	return r.Off, r.Len, true
}

// TestS3RangeAnswers covers answers to ranged GETs that versitygw does not
// give: a 200 with the whole object, and answers that contradict the request.
func TestS3RangeAnswers(t *testing.T) {
	fake, s := newFakeS3(t)
	body := []byte("0123456789")
	for _, tc := range []struct {
		name         string
		status       int
		contentRange string
		body         []byte
		r            staging.Range
		want         string
		wantErr      error // nil: any error
		fails        bool
	}{
		{"206 middle", 206, "bytes 2-4/10", body[2:5], staging.Bytes(2, 3), "234", nil, false},
		{"206 suffix", 206, "bytes 7-9/10", body[7:], staging.Suffix(3), "789", nil, false},
		{"200 whole for a range", 200, "", body, staging.Bytes(2, 3), "234", nil, false},
		{"200 whole for a suffix", 200, "", body, staging.Suffix(3), "789", nil, false},
		{"200 empty for a suffix", 200, "", nil, staging.Suffix(3), "", staging.ErrInvalidRange, true},
		{"200 short for a range", 200, "", body[:2], staging.Bytes(2, 3), "", staging.ErrInvalidRange, true},
		{"206 wrong start", 206, "bytes 3-5/10", body[3:6], staging.Bytes(2, 3), "", nil, true},
		{"206 wrong length", 206, "bytes 2-5/10", body[2:6], staging.Bytes(2, 3), "", nil, true},
		{"206 body shorter than its range", 206, "bytes 2-4/10", body[2:4], staging.Bytes(2, 3), "", nil, true},
		{"206 malformed", 206, "bytes 2-4", body[2:5], staging.Bytes(2, 3), "", nil, true},
		{"206 last past size", 206, "bytes 2-4/4", body[2:5], staging.Bytes(2, 3), "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake.set(tc.status, tc.contentRange, tc.body)
			data, info, err := s.Get(t.Context(), "k", tc.r)
			if tc.fails {
				if err == nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("get: %q, %v; want an error matching %v", data, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.want || info.Size != int64(len(body)) {
				t.Errorf("get: %q of %d bytes, want %q of %d", data, info.Size, tc.want, len(body))
			}
		})
	}
}

// TestS3ListAnswers covers listing answers versitygw does not give: URL
// encoded keys (which it ignores) and ListMultipartUploads pages (which its
// posix backend refuses to continue: see the notes of package s3test).
func TestS3ListAnswers(t *testing.T) {
	fake, _ := newFakeS3(t)
	var queries []string
	serve := func(pages ...string) func(w http.ResponseWriter, r *http.Request) {
		queries = nil
		return func(w http.ResponseWriter, r *http.Request) {
			fake.mu.Lock()
			queries = append(queries, r.URL.RawQuery)
			n := len(queries)
			fake.mu.Unlock()
			if n > len(pages) {
				http.Error(w, "no more pages", http.StatusNotImplemented)
				return
			}
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(pages[n-1]))
		}
	}
	s := fake.store(t, "vol/")

	fake.mu.Lock()
	fake.serve = serve(`<ListBucketResult><Name>b</Name><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>
<Contents><Key>vol/a%01b</Key><Size>1</Size><ETag>"e1"</ETag></Contents>
<Contents><Key>vol/sp+ace%2Bplus</Key><Size>2</Size><ETag>"e2"</ETag></Contents></ListBucketResult>`)
	fake.mu.Unlock()
	page, err := s.List(t.Context(), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range page.Objects {
		keys = append(keys, o.Key)
	}
	if want := []string{"a\x01b", "sp ace+plus"}; !slices.Equal(keys, want) {
		t.Errorf("url-encoded listing: keys %q, want %q", keys, want)
	}
	fake.mu.Lock()
	q := strings.Join(queries, " ")
	fake.mu.Unlock()
	if !strings.Contains(q, "encoding-type=url") {
		t.Errorf("listing did not ask for URL encoding: %s", q)
	}

	fake.mu.Lock()
	fake.serve = serve(
		`<ListMultipartUploadsResult><Bucket>b</Bucket><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
<NextKeyMarker>vol/k%2B1</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>
<Upload><Key>vol/k%2B1</Key><UploadId>u1</UploadId><Initiated>2026-01-01T00:00:01Z</Initiated></Upload>
<Upload><Key>vol/k%2B1</Key><UploadId>u2</UploadId><Initiated>2026-01-01T00:00:02Z</Initiated></Upload></ListMultipartUploadsResult>`,
		`<ListMultipartUploadsResult><Bucket>b</Bucket><IsTruncated>false</IsTruncated>
<Upload><Key>vol/k+1</Key><UploadId>u3</UploadId><Initiated>2026-01-01T00:00:03Z</Initiated></Upload>
<Upload><Key>vol/a</Key><UploadId>u4</UploadId><Initiated>2026-01-01T00:00:04Z</Initiated></Upload></ListMultipartUploadsResult>`)
	fake.mu.Unlock()
	ups, err := s.ListMultipartUploads(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range ups {
		got = append(got, u.Key+" "+u.UploadID)
	}
	if want := []string{"a u4", "k+1 u1", "k+1 u2", "k+1 u3"}; !slices.Equal(got, want) {
		t.Errorf("uploads %q, want %q", got, want)
	}
	fake.mu.Lock()
	asked := slices.Clone(queries)
	fake.mu.Unlock()
	if len(asked) != 2 || !strings.Contains(asked[1], "key-marker=vol%2Fk%2B1") || !strings.Contains(asked[1], "upload-id-marker=u2") {
		t.Errorf("second page asked with %q, want the decoded key marker and the upload id marker", asked)
	}

	fake.mu.Lock()
	fake.serve = serve(`<ListMultipartUploadsResult><Bucket>b</Bucket><IsTruncated>true</IsTruncated></ListMultipartUploadsResult>`)
	fake.mu.Unlock()
	if _, err := s.ListMultipartUploads(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "marker") {
		t.Errorf("truncated answer without a marker: %v, want an error", err)
	}
}

// FuzzS3GetAnswer feeds the store's GET arbitrary answers: it must not
// panic, and what it accepts must be the range it asked for.
func FuzzS3GetAnswer(f *testing.F) {
	f.Add(true, "bytes 2-4/10", []byte("234"), int64(2), int64(3), int64(0))
	f.Add(false, "", []byte("0123456789"), int64(0), int64(0), int64(4))
	f.Add(true, "bytes 0-0/1", []byte("x"), int64(0), int64(0), int64(1))
	f.Add(true, "bytes */10", []byte{}, int64(12), int64(1), int64(0))
	fake, _ := newFakeS3(f)
	// Few, quick retries: an answer the client refuses is retried, and the
	// default backoff would make one input take many seconds.
	s, err := s3.New(context.Background(), s3.Config{
		Bucket: "b", Endpoint: fake.url, PathStyle: true, AccessKey: "a", SecretKey: "s",
		Timeouts: s3.Timeouts{RetryMax: time.Second}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, partial bool, contentRange string, body []byte, off, n, suffix int64) {
		// A field value holds no control character but tab (RFC 9110 5.5).
		if strings.ContainsFunc(contentRange, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) || len(body) > 1<<16 {
			return // not a header value a server can send; keep runs quick
		}
		status := 200
		if partial {
			status = 206
		}
		fake.set(status, contentRange, body)
		r := staging.Range{Off: off, Len: n, Suffix: suffix}
		data, info, err := s.Get(t.Context(), "k", r)
		if err != nil {
			return
		}
		wantOff, wantN, ok := resolve(r, info.Size)
		if !ok {
			t.Fatalf("accepted %q (Content-Range %q) for %+v of a %d-byte object", data, contentRange, r, info.Size)
		}
		if int64(len(data)) != wantN {
			t.Fatalf("got %d bytes for %+v of a %d-byte object, want %d", len(data), r, info.Size, wantN)
		}
		if contentRange == "" && !bytes.Equal(data, body[wantOff:wantOff+wantN]) {
			t.Fatalf("cut the whole answer wrong: %q from %q for %+v", data, body, r)
		}
	})
}

// BenchmarkS3 measures Put and Get throughput against the test bucket
// (loopback versitygw unless the environment names another).
func BenchmarkS3(b *testing.B) {
	ctx := context.Background()
	s := s3test.NewS3(b)
	for _, size := range []int{1 << 20, 16 << 20} {
		data := bytes.Repeat([]byte{0xa5}, size)
		key := fmt.Sprintf("bench-%d", size)
		b.Run(fmt.Sprintf("Put/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := s.Put(ctx, key, data, staging.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("Get/%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, _, err := s.Get(ctx, key, staging.Whole()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
