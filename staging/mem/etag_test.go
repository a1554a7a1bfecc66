package mem_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/s3test"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func TestMemS3ETagsContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) staging.Store { return mem.NewS3ETags() })
}

// putMultipart uploads parts as one object under key and returns its info.
func putMultipart(ctx context.Context, s staging.Store, key string, parts [][]byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	id, err := s.CreateMultipart(ctx, key, opts)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	var done []staging.CompletedPart
	for i, p := range parts {
		etag, err := s.UploadPart(ctx, key, id, int32(i+1), p)
		if err != nil {
			return staging.ObjectInfo{}, err
		}
		done = append(done, staging.CompletedPart{Number: int32(i + 1), ETag: etag})
	}
	info, err := s.CompleteMultipart(ctx, key, id, done, opts.Conditions)
	if err != nil {
		_ = s.AbortMultipart(ctx, key, id)
	}
	return info, err
}

// etagWrite is one write of an ETag table: a Put of body, or a multipart
// upload of parts when parts is not nil.
type etagWrite struct {
	body  []byte
	parts [][]byte
	md    map[string]string
}

func (w etagWrite) do(ctx context.Context, s staging.Store, key string, cond staging.Conditions) (staging.ObjectInfo, error) {
	opts := staging.PutOptions{Metadata: w.md, Conditions: cond}
	if w.parts != nil {
		return putMultipart(ctx, s, key, w.parts, opts)
	}
	return s.Put(ctx, key, w.body, opts)
}

var (
	partA = bytes.Repeat([]byte{'a'}, staging.MinPartSize)
	partB = bytes.Repeat([]byte{'b'}, staging.MinPartSize)
)

// etagBodies are writes whose S3 ETags are known: the MD5s were computed
// apart from the code under test (md5sum, and for multipart the MD5 of the
// parts' binary MD5s).
var etagBodies = []struct {
	name string
	w    etagWrite
	want string
}{
	{"empty", etagWrite{body: []byte{}}, `"d41d8cd98f00b204e9800998ecf8427e"`},
	{"hello", etagWrite{body: []byte("hello")}, `"5d41402abc4b2a76b9719d911017c592"`},
	{"hello with metadata", etagWrite{body: []byte("hello"), md: map[string]string{"v": "2"}}, `"5d41402abc4b2a76b9719d911017c592"`},
	{"one part", etagWrite{parts: [][]byte{[]byte("hello")}}, `"` + md5OfMD5s([]byte("hello")) + `-1"`},
	{"two parts", etagWrite{parts: [][]byte{partA, []byte("tail")}}, `"` + md5OfMD5s(partA, []byte("tail")) + `-2"`},
	{"three parts", etagWrite{parts: [][]byte{partA, partB, partA}}, `"` + md5OfMD5s(partA, partB, partA) + `-3"`},
}

func TestMemS3ETags(t *testing.T) {
	ctx := t.Context()
	// The MD5s of "hello" and "" above are md5sum's; md5OfMD5s is checked
	// here against a value computed by hand with md5sum as well
	// (printf hello | md5sum | xxd -r -p | md5sum).
	if got, want := md5OfMD5s([]byte("hello")), "62109206880d38a4010a98e11243924a"; got != want {
		t.Fatalf("md5OfMD5s(hello) = %s, want %s", got, want)
	}
	for _, tc := range etagBodies {
		t.Run(tc.name, func(t *testing.T) {
			m := mem.NewS3ETags()
			first, err := tc.w.do(ctx, m, "k", staging.Conditions{})
			if err != nil {
				t.Fatal(err)
			}
			if first.ETag != tc.want {
				t.Fatalf("ETag %s, want %s", first.ETag, tc.want)
			}
			if head, err := m.Head(ctx, "k"); err != nil || head.ETag != tc.want {
				t.Fatalf("Head: ETag %s, %v; want %s", head.ETag, err, tc.want)
			}
			// The same bytes again with other metadata, under If-Match of
			// the first write: the condition holds and the ETag stays.
			again := tc.w
			again.md = map[string]string{"rewritten": "yes"}
			second, err := again.do(ctx, m, "k", staging.Conditions{IfMatch: first.ETag})
			if err != nil {
				t.Fatalf("rewrite under If-Match of the first ETag: %v", err)
			}
			if second.ETag != first.ETag {
				t.Fatalf("rewrite with new metadata: ETag %s, want the first's %s", second.ETag, first.ETag)
			}
			if second.Metadata["rewritten"] != "yes" {
				t.Fatalf("rewrite: metadata %v", second.Metadata)
			}
			// Other bytes change it, and then the old ETag no longer matches.
			other := etagWrite{body: []byte("other bytes")}
			third, err := other.do(ctx, m, "k", staging.Conditions{IfMatch: first.ETag})
			if err != nil {
				t.Fatal(err)
			}
			if third.ETag == first.ETag {
				t.Fatalf("other bytes kept ETag %s", third.ETag)
			}
			if _, err := tc.w.do(ctx, m, "k", staging.Conditions{IfMatch: first.ETag}); !errors.Is(err, staging.ErrPrecondition) {
				t.Fatalf("If-Match of a replaced ETag: %v, want ErrPrecondition", err)
			}
		})
	}
}

// The default store keeps its unique ETags: a rewrite of the same bytes
// changes the ETag.
func TestMemUniqueETags(t *testing.T) {
	ctx := t.Context()
	m := mem.NewUniqueETags()
	a, err := m.Put(ctx, "k", []byte("hello"), staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Put(ctx, "k", []byte("hello"), staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.ETag == b.ETag {
		t.Fatalf("two writes of the same bytes share ETag %s", a.ETag)
	}
}

// The memory store's S3 ETags are the ones a real server gives for the
// same writes (versitygw unless the environment names a bucket).
func TestMemS3ETagsMatchServer(t *testing.T) {
	ctx := t.Context()
	m := mem.NewS3ETags()
	s := s3test.NewStore(t)
	for _, tc := range etagBodies {
		t.Run(tc.name, func(t *testing.T) {
			key := "k/" + tc.name
			if tc.w.parts != nil {
				// The parts' own ETags, from an upload left unfinished.
				mid, err := m.CreateMultipart(ctx, key, staging.PutOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sid, err := s.CreateMultipart(ctx, key, staging.PutOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range tc.w.parts {
					me, err := m.UploadPart(ctx, key, mid, int32(i+1), p)
					if err != nil {
						t.Fatal(err)
					}
					se, err := s.UploadPart(ctx, key, sid, int32(i+1), p)
					if err != nil {
						t.Fatal(err)
					}
					if me != se {
						t.Errorf("part %d: memory ETag %s, server %s", i+1, me, se)
					}
				}
				if err := s.AbortMultipart(ctx, key, sid); err != nil {
					t.Fatal(err)
				}
			}
			mi, err := tc.w.do(ctx, m, key, staging.Conditions{})
			if err != nil {
				t.Fatal(err)
			}
			si, err := tc.w.do(ctx, s, key, staging.Conditions{})
			if err != nil {
				t.Fatal(err)
			}
			sh, err := s.Head(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if mi.ETag != si.ETag || si.ETag != sh.ETag {
				t.Fatalf("ETag: memory %s, server %s (Head %s)", mi.ETag, si.ETag, sh.ETag)
			}
		})
	}
}

// md5OfMD5s is the MD5, in hex, of the binary MD5s of parts.
func md5OfMD5s(parts ...[]byte) string {
	h := md5.New()
	for _, p := range parts {
		s := md5.Sum(p)
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}
