package s3_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// seen is a request as a fake S3 server received it.
type seen struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// recordS3 answers the requests of Put, multipart uploads, Get, Head and
// Delete as S3 would, and records them.
type recordS3 struct {
	mu      sync.Mutex
	reqs    []seen
	uploads int // how many were created
}

func (f *recordS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
	f.uploads++
	id := f.uploads
	f.mu.Unlock()
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>up%d</UploadId></InitiateMultipartUploadResult>`, id)
	case r.Method == http.MethodPost && q.Has("uploadId"):
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><ETag>"e-2"</ETag></CompleteMultipartUploadResult>`)
	case r.Method == http.MethodPut:
		w.Header().Set("ETag", `"e"`)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		w.Header().Set("ETag", `"e"`)
		w.Header().Set("Content-Length", "5")
		if r.Method == http.MethodGet {
			io.WriteString(w, "hello")
		}
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unexpected", http.StatusBadRequest)
	}
}

// take returns the requests received since the last call.
func (f *recordS3) take() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reqs
	f.reqs = nil
	return r
}

// fakeConfig is a store configuration for a fake server at url.
func fakeConfig(url string) s3.Config {
	return s3.Config{Bucket: "b", Endpoint: url, Region: "us-east-1", PathStyle: true, AccessKey: "AK", SecretKey: "SK"}
}

// TestS3OptionHeaders checks the headers that SSE, the KMS key, the storage
// class, requester pays and each checksum put on every kind of request.
func TestS3OptionHeaders(t *testing.T) {
	ctx := t.Context()
	data := []byte("hello")
	for _, tc := range []struct {
		name string
		set  func(*s3.Config)
		// headers each kind of request must carry ("" value: must lack);
		// kinds: put, create, part, complete, get, head, delete.
		want map[string]map[string]string
		// in the CompleteMultipartUpload body, or not
		completeHasCRC bool
	}{
		{"defaults", func(*s3.Config) {}, map[string]map[string]string{
			// The checksum replaces no signature of the body: no SHA-256 is
			// computed besides it.
			"put": {"X-Amz-Checksum-Crc32c": s3.CRC32COf(data), "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
				"X-Amz-Server-Side-Encryption": "", "X-Amz-Storage-Class": "", "X-Amz-Request-Payer": ""},
			"create": {"X-Amz-Checksum-Algorithm": "CRC32C", "X-Amz-Server-Side-Encryption": ""},
			"part":   {"X-Amz-Checksum-Crc32c": s3.CRC32COf(data), "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD"},
			"get":    {"X-Amz-Request-Payer": ""},
		}, true},
		{"kms, class, requester pays", func(c *s3.Config) {
			c.SSE, c.SSEKMSKeyID, c.StorageClass, c.RequesterPays = s3.SSEKMS, "alias/ckpt", "INTELLIGENT_TIERING", true
		}, map[string]map[string]string{
			"put": {"X-Amz-Server-Side-Encryption": "aws:kms", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": "alias/ckpt",
				"X-Amz-Storage-Class": "INTELLIGENT_TIERING", "X-Amz-Request-Payer": "requester"},
			"create": {"X-Amz-Server-Side-Encryption": "aws:kms", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": "alias/ckpt",
				"X-Amz-Storage-Class": "INTELLIGENT_TIERING", "X-Amz-Request-Payer": "requester"},
			"part":     {"X-Amz-Request-Payer": "requester", "X-Amz-Storage-Class": ""},
			"complete": {"X-Amz-Request-Payer": "requester"},
			"get":      {"X-Amz-Request-Payer": "requester"},
			"head":     {"X-Amz-Request-Payer": "requester"},
			"delete":   {"X-Amz-Request-Payer": "requester"},
		}, true},
		{"sse-s3", func(c *s3.Config) { c.SSE = s3.SSES3 }, map[string]map[string]string{
			"put":    {"X-Amz-Server-Side-Encryption": "AES256", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": ""},
			"create": {"X-Amz-Server-Side-Encryption": "AES256"},
		}, true},
		{"dsse", func(c *s3.Config) { c.SSE = s3.SSEKMSDSSE }, map[string]map[string]string{
			"put": {"X-Amz-Server-Side-Encryption": "aws:kms:dsse"},
		}, true},
		{"crc32", func(c *s3.Config) { c.Checksum = s3.ChecksumCRC32 }, map[string]map[string]string{
			"put":    {"X-Amz-Checksum-Crc32": "NhCmhg==", "X-Amz-Checksum-Crc32c": "", "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD"},
			"create": {"X-Amz-Checksum-Algorithm": "CRC32"},
			"part":   {"X-Amz-Checksum-Crc32": "NhCmhg==", "X-Amz-Checksum-Crc32c": ""},
		}, false},
		{"crc64nvme: single puts only", func(c *s3.Config) { c.Checksum = s3.ChecksumCRC64NVME }, map[string]map[string]string{
			"put":    {"X-Amz-Checksum-Crc32c": "", "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD"},
			"create": {"X-Amz-Checksum-Algorithm": "CRC32C"},
			"part":   {"X-Amz-Checksum-Crc32c": s3.CRC32COf(data)},
		}, true},
		{"off", func(c *s3.Config) { c.Checksum = s3.ChecksumOff }, map[string]map[string]string{
			"put":    {"X-Amz-Checksum-Crc32c": "", "X-Amz-Sdk-Checksum-Algorithm": ""},
			"create": {"X-Amz-Checksum-Algorithm": ""},
			"part":   {"X-Amz-Checksum-Crc32c": ""},
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &recordS3{}
			srv := httptest.NewServer(f)
			defer srv.Close()
			c := fakeConfig(srv.URL)
			tc.set(&c)
			s := newS3(t, c)
			kinds := map[string]seen{}
			do := func(kind string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				r := f.take()
				if len(r) != 1 {
					t.Fatalf("%s: %d requests, want 1", kind, len(r))
				}
				kinds[kind] = r[0]
			}
			_, err := s.Put(ctx, "k", data, staging.PutOptions{})
			do("put", err)
			id, err := s.CreateMultipart(ctx, "k", staging.PutOptions{})
			do("create", err)
			etag, err := s.UploadPart(ctx, "k", id, 1, data)
			do("part", err)
			_, err = s.CompleteMultipart(ctx, "k", id, []staging.CompletedPart{{Number: 1, ETag: etag}}, staging.Conditions{})
			do("complete", err)
			_, _, err = s.Get(ctx, "k", staging.Whole())
			do("get", err)
			_, err = s.Head(ctx, "k")
			do("head", err)
			do("delete", s.Delete(ctx, "k"))

			if tc.name == "crc64nvme: single puts only" {
				if got := kinds["put"].header.Get("X-Amz-Checksum-Crc64nvme"); got == "" {
					t.Errorf("put: no x-amz-checksum-crc64nvme; headers %v", kinds["put"].header)
				}
			}
			for kind, hs := range tc.want {
				for h, want := range hs {
					if got := kinds[kind].header.Get(h); got != want {
						t.Errorf("%s: %s = %q, want %q", kind, h, got, want)
					}
				}
			}
			body := string(kinds["complete"].body)
			if tc.name == "crc32" && !strings.Contains(body, "<ChecksumCRC32>NhCmhg==</ChecksumCRC32>") {
				t.Errorf("complete: no CRC32 of the part: %s", body)
			}
			if has := strings.Contains(body, "<ChecksumCRC32C>"+s3.CRC32COf(data)+"</ChecksumCRC32C>"); has != tc.completeHasCRC {
				t.Errorf("complete: part checksum in the body = %t, want %t: %s", has, tc.completeHasCRC, body)
			}
		})
	}
}

// TestS3OptionsRefused checks that a wrong option fails NewS3 with a message
// naming it.
func TestS3OptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*s3.Config)
		msg  string
	}{
		{"unknown sse", func(c *s3.Config) { c.SSE = "aes256" }, `sse "aes256"`},
		{"kms key without kms", func(c *s3.Config) { c.SSEKMSKeyID = "k" }, "sse_kms_key_id needs sse=aws:kms"},
		{"kms key with AES256", func(c *s3.Config) { c.SSE, c.SSEKMSKeyID = s3.SSES3, "k" }, "sse_kms_key_id needs sse=aws:kms"},
		{"lower-case class", func(c *s3.Config) { c.StorageClass = "standard" }, `storage class "standard"`},
		{"class with a space", func(c *s3.Config) { c.StorageClass = "STANDARD IA" }, `storage class "STANDARD IA"`},
		{"class ending in _", func(c *s3.Config) { c.StorageClass = "STANDARD_" }, `storage class`},
		{"unknown checksum", func(c *s3.Config) { c.Checksum = "md5" }, `checksum "md5"`},
		{"missing ca bundle", func(c *s3.Config) { c.CABundle = filepath.Join(t.TempDir(), "none.pem") }, "ca_bundle: open"},
		{"ca bundle without PEM", func(c *s3.Config) {
			p := filepath.Join(t.TempDir(), "bad.pem")
			if err := os.WriteFile(p, []byte("not a certificate\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c.CABundle = p
		}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeConfig("http://127.0.0.1:1")
			tc.set(&c)
			_, err := s3.New(t.Context(), c)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("NewS3 = %v, want an error with %q", err, tc.msg)
			}
		})
	}
	for _, class := range []string{"STANDARD", "INTELLIGENT_TIERING", "STANDARD_IA", "GLACIER_IR", "EXPRESS_ONEZONE"} {
		c := fakeConfig("http://127.0.0.1:1")
		c.StorageClass = class
		if _, err := s3.New(t.Context(), c); err != nil {
			t.Errorf("storage class %s: %v", class, err)
		}
	}
}

// TestS3CABundle: a TLS endpoint whose CA the system does not know fails
// with ErrUntrustedCert explained in one line, and is reached with
// ca_bundle naming its certificate.
func TestS3CABundle(t *testing.T) {
	f := &recordS3{}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(bundle, pemCert, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", "")

	s := newS3(t, fakeConfig(srv.URL))
	_, err := s.Head(t.Context(), "k")
	if err == nil {
		t.Fatal("Head through an untrusted certificate succeeded")
	}
	if n := len(f.take()); n != 0 {
		t.Errorf("%d requests reached the server through an untrusted certificate", n)
	}
	e := s.Explain(err)
	if !errors.Is(e, s3.ErrUntrustedCert) {
		t.Fatalf("Explain = %v, want ErrUntrustedCert", e)
	}
	if msg := e.Error(); !strings.Contains(msg, "the endpoint's certificate is not trusted") || !strings.Contains(msg, "ca_bundle=") || strings.Contains(msg, "\n") {
		t.Errorf("explained as %q", msg)
	}

	c := fakeConfig(srv.URL)
	c.CABundle = bundle
	s = newS3(t, c)
	if _, err := s.Head(t.Context(), "k"); err != nil {
		t.Fatalf("Head with ca_bundle: %v", err)
	}
	if n := len(f.take()); n != 1 {
		t.Errorf("%d requests reached the server with ca_bundle, want 1", n)
	}

	// Over https the checksum is a trailer of the streamed body.
	data := []byte("hello")
	if _, err := s.Put(t.Context(), "k", data, staging.PutOptions{}); err != nil {
		t.Fatalf("Put with ca_bundle: %v", err)
	}
	r := f.take()
	if len(r) != 1 {
		t.Fatalf("%d requests for a Put", len(r))
	}
	h := r[0].header
	if h.Get("X-Amz-Trailer") != "x-amz-checksum-crc32c" || h.Get("X-Amz-Content-Sha256") != "STREAMING-UNSIGNED-PAYLOAD-TRAILER" ||
		!strings.Contains(string(r[0].body), "x-amz-checksum-crc32c:"+s3.CRC32COf(data)) {
		t.Errorf("https Put: trailer %q, content-sha256 %q, body %q", h.Get("X-Amz-Trailer"), h.Get("X-Amz-Content-Sha256"), r[0].body)
	}
}

// TestS3RegionLookup: with no region anywhere and no endpoint, NewS3 asks
// for the bucket's region and signs for it.
func TestS3RegionLookup(t *testing.T) {
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"} {
		t.Setenv(v, "")
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, tc := range []struct {
		name   string
		status int
		region string // x-amz-bucket-region answered
		want   string // region found; "" for an error
		msg    string // in the error
	}{
		{"moved", http.StatusMovedPermanently, "eu-west-3", "eu-west-3", ""},
		{"forbidden", http.StatusForbidden, "ap-southeast-2", "ap-southeast-2", ""},
		{"ok", http.StatusOK, "us-east-1", "us-east-1", ""},
		{"missing bucket", http.StatusNotFound, "", "", "no such bucket"},
		{"no header", http.StatusOK, "", "", "names none"},
		{"not a region", http.StatusMovedPermanently, "eu west/3", "", "not a region"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Store(r.Method + " " + r.URL.Path + " auth=" + r.Header.Get("Authorization"))
				if tc.region != "" {
					w.Header().Set("X-Amz-Bucket-Region", tc.region)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			c := s3.WithRegionLookup(s3.Config{Bucket: "my-bucket", AccessKey: "AK", SecretKey: "SK"}, srv.URL)
			s, err := s3.New(t.Context(), c)
			if g, _ := got.Load().(string); g != "HEAD /my-bucket auth=" {
				t.Errorf("the lookup sent %q, want an unsigned HEAD /my-bucket", g)
			}
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "no region configured") {
					t.Fatalf("NewS3 = %v, want an error with %q", err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Region() != tc.want {
				t.Errorf("region %q, want %q", s.Region(), tc.want)
			}
		})
	}
	// A configured region is not looked up.
	c := s3.WithRegionLookup(s3.Config{Bucket: "b", Region: "eu-north-1", AccessKey: "AK", SecretKey: "SK"}, "http://127.0.0.1:1")
	if s, err := s3.New(t.Context(), c); err != nil || s.Region() != "eu-north-1" {
		t.Errorf("configured region: %v, %v", s, err)
	}
}

// flipClient changes one byte in the middle of the body of every request
// with a body of at least min bytes, after the SDK computed its checksum,
// and records the checksum headers it saw.
type flipClient struct {
	inner   aws.HTTPClient
	min     int
	mu      sync.Mutex
	flipped int
	sums    []string
}

func (c *flipClient) Do(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.sums = append(c.sums, req.Header.Get("X-Amz-Checksum-Crc32c"))
	c.mu.Unlock()
	if req.Body == nil || req.ContentLength < int64(c.min) {
		return c.inner.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	body[len(body)/2] ^= 0x01
	c.mu.Lock()
	c.flipped++
	c.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return c.inner.Do(req)
}

// TestS3ChecksumRefusesCorruption: versitygw checks the CRC32C that uploads
// carry, so a body changed after the checksum was computed is refused, for
// a PUT and for a part; with checksum=off the same change is stored.
func TestS3ChecksumRefusesCorruption(t *testing.T) {
	ctx := t.Context()
	data := bytes.Repeat([]byte("checkpoint"), 1<<10)
	for _, tc := range []struct {
		checksum string
		refused  bool
	}{{"", true}, {s3.ChecksumCRC32C, true}, {s3.ChecksumOff, false}} {
		t.Run("checksum="+tc.checksum, func(t *testing.T) {
			fc := &flipClient{min: 1 << 10}
			c := s3test.Config(t)
			c.Checksum = tc.checksum
			c = s3.WithHTTPWrap(c, func(h aws.HTTPClient) aws.HTTPClient { fc.inner = h; return fc })
			s := newS3(t, c)
			_, err := s.Put(ctx, "obj", data, staging.PutOptions{})
			if tc.refused {
				if err == nil {
					t.Fatal("a PUT changed after its checksum was stored")
				}
				if code := apiCode(err); code != "BadDigest" || httpStatus(err) != http.StatusBadRequest {
					t.Errorf("changed PUT refused with %q (%d), want 400 BadDigest: %v", code, httpStatus(err), err)
				}
				if _, _, gerr := s.Get(ctx, "obj", staging.Whole()); !errors.Is(gerr, staging.ErrNotFound) {
					t.Errorf("after the refused PUT, Get = %v, want ErrNotFound", gerr)
				}
			} else if err != nil {
				t.Fatalf("PUT without checksum: %v", err)
			}
			id, err := s.CreateMultipart(ctx, "mp", staging.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.AbortMultipart(context.WithoutCancel(ctx), "mp", id)
			_, err = s.UploadPart(ctx, "mp", id, 1, data)
			if (err != nil) != tc.refused {
				t.Errorf("changed part: err = %v, want refused=%t", err, tc.refused)
			}
			fc.mu.Lock()
			defer fc.mu.Unlock()
			if fc.flipped == 0 {
				t.Fatal("no body was changed")
			}
			want := s3.CRC32COf(data)
			if !tc.refused {
				want = ""
			}
			if fc.sums[0] != want { // the first request is the PUT
				t.Errorf("PUT sent x-amz-checksum-crc32c %q, want %q", fc.sums[0], want)
			}
		})
	}
}

// TestS3MultipartChecksumsFromAnotherStore: an upload completed by a store
// that did not start it (after a restart) names its parts' checksums, read
// back with ListParts, and publishes the object.
func TestS3MultipartChecksumsFromAnotherStore(t *testing.T) {
	ctx := t.Context()
	c := s3test.Config(t)
	var mu sync.Mutex
	listParts := map[string]int{} // ListParts requests by store
	counted := func(name string) s3.Config {
		return s3.WithHTTPWrap(c, func(h aws.HTTPClient) aws.HTTPClient {
			return doFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodGet && r.URL.Query().Has("uploadId") {
					mu.Lock()
					listParts[name]++
					mu.Unlock()
				}
				return h.Do(r)
			})
		})
	}
	a, b := newS3(t, counted("a")), newS3(t, counted("b"))
	part := bytes.Repeat([]byte{'p'}, 5<<20)
	for _, tc := range []struct {
		name      string
		completer *s3.Store
		listed    string // the store that lists the parts
	}{{"same store", a, ""}, {"another store", b, "b"}} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			id, err := a.CreateMultipart(ctx, key, staging.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var parts []staging.CompletedPart
			for n := int32(1); n <= 2; n++ {
				etag, err := a.UploadPart(ctx, key, id, n, part)
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, staging.CompletedPart{Number: n, ETag: etag})
			}
			info, err := tc.completer.CompleteMultipart(ctx, key, id, parts, staging.Conditions{})
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != int64(2*len(part)) {
				t.Errorf("size %d, want %d", info.Size, 2*len(part))
			}
			got, _, err := b.Get(ctx, key, staging.Whole())
			if err != nil || !bytes.Equal(got, append(append([]byte(nil), part...), part...)) {
				t.Errorf("read back %d bytes, %v", len(got), err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[string]int{}
			if tc.listed != "" {
				want[tc.listed] = 1
			}
			if fmt.Sprint(listParts) != fmt.Sprint(want) {
				t.Errorf("ListParts requests %v, want %v", listParts, want)
			}
			clear(listParts)
		})
	}
}

// BenchmarkS3Put16MiB measures the cost of the upload checksum: PUTs of
// 16 MiB to versitygw on loopback, with each checksum and without.
func BenchmarkS3Put16MiB(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	for _, sum := range []string{s3.ChecksumOff, s3.ChecksumCRC32C, s3.ChecksumCRC32, s3.ChecksumCRC64NVME} {
		b.Run("checksum="+sum, func(b *testing.B) {
			c := s3test.Config(b)
			c.Checksum = sum
			s := newS3(b, c)
			b.SetBytes(int64(len(data)))
			for i := 0; b.Loop(); i++ {
				if _, err := s.Put(b.Context(), fmt.Sprintf("o%d", i%4), data, staging.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCRC32C16MiB is the client's share of the upload checksum: one
// pass of CRC32C over a 16 MiB body.
func BenchmarkCRC32C16MiB(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s3.CRC32COf(data)
	}
}

// doFunc is an HTTP client made of a function.
type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// TestS3KnownUploadsDropped: what the store keeps of an upload (sizes, part
// checksums) goes with an abort and with a failed completion, and it keeps
// no more than a bounded number of uploads.
func TestS3KnownUploadsDropped(t *testing.T) {
	ctx := t.Context()
	s := s3test.NewS3(t)
	small := []byte("small part")
	for _, tc := range []struct {
		name string
		end  func(key, id string) error
	}{
		{"abort", func(key, id string) error { return s.AbortMultipart(ctx, key, id) }},
		{"failed complete", func(key, id string) error {
			var parts []staging.CompletedPart
			for n := int32(1); n <= 2; n++ {
				etag, err := s.UploadPart(ctx, key, id, n, small)
				if err != nil {
					return err
				}
				parts = append(parts, staging.CompletedPart{Number: n, ETag: etag})
			}
			if _, err := s.CompleteMultipart(ctx, key, id, parts, staging.Conditions{}); !errors.Is(err, staging.ErrPartTooSmall) {
				return fmt.Errorf("complete of small parts = %v, want ErrPartTooSmall", err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			id, err := s.CreateMultipart(ctx, key, staging.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// Gone already after an abort.
			defer s.AbortMultipart(context.WithoutCancel(ctx), key, id)
			if _, err := s.UploadPart(ctx, key, id, 1, small); err != nil {
				t.Fatal(err)
			}
			if n := s3.KnownUploads(s); n != 1 {
				t.Fatalf("%d uploads known after a create, want 1", n)
			}
			if err := tc.end(key, id); err != nil {
				t.Fatal(err)
			}
			if n := s3.KnownUploads(s); n != 0 {
				t.Errorf("%d uploads known after %s, want 0", n, tc.name)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		srv := httptest.NewServer(&recordS3{})
		defer srv.Close()
		s := newS3(t, fakeConfig(srv.URL))
		const most = 8
		s3.SetMaxKnownUploads(s, most)
		for i := 0; i < 2*most; i++ {
			if _, err := s.CreateMultipart(ctx, "k", staging.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if n := s3.KnownUploads(s); n != most {
			t.Errorf("%d uploads known after %d creates, want the most, %d", n, 2*most, most)
		}
	})
}
