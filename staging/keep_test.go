package staging_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/limit"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A part's body given up reaches the memory store through every wrapper,
// which keeps it; a body uploaded as UploadPart is copied.
func TestUploadPartGiven(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(staging.Store) staging.Store
	}{
		{"mem", func(s staging.Store) staging.Store { return s }},
		{"counting", func(s staging.Store) staging.Store { return counting.New(s) }},
		{"limit", func(s staging.Store) staging.Store { return limit.New(s, 2) }},
		{"link", func(s staging.Store) staging.Store { return link.New(s, link.ProfileNone) }},
		{"faulty", func(s staging.Store) staging.Store { return faulty.New(s, 1) }},
		{"all", func(s staging.Store) staging.Store {
			return counting.New(limit.New(link.New(faulty.New(s, 1), link.ProfileNone), 2))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := tc.wrap(mem.New())
			id, err := st.CreateMultipart(ctx, "k", staging.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			given := bytes.Repeat([]byte("g"), staging.MinPartSize)
			e1, kept, err := staging.UploadPartGiven(ctx, st, "k", id, 1, given)
			if err != nil || !kept {
				t.Fatalf("given: kept %v, %v", kept, err)
			}
			copied := bytes.Repeat([]byte("c"), 100)
			e2, err := st.UploadPart(ctx, "k", id, 2, copied)
			if err != nil {
				t.Fatal(err)
			}
			copied[0] = 'X' // the caller may reuse what it did not give up
			if _, err := st.CompleteMultipart(ctx, "k", id, []staging.CompletedPart{{Number: 1, ETag: e1}, {Number: 2, ETag: e2}}, staging.Conditions{}); err != nil {
				t.Fatal(err)
			}
			if _, kept, err := staging.PutGiven(ctx, st, "p", []byte("put"), staging.PutOptions{}); err != nil || !kept {
				t.Fatalf("put given: kept %v, %v", kept, err)
			}
			got, _, err := st.Get(ctx, "k", staging.Range{})
			if err != nil {
				t.Fatal(err)
			}
			want := append(bytes.Repeat([]byte("g"), staging.MinPartSize), bytes.Repeat([]byte("c"), 100)...)
			if !bytes.Equal(got, want) {
				t.Fatal("the object is not the parts as they were uploaded")
			}
		})
	}
}
