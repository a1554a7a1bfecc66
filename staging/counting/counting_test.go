package counting_test

import (
	"context"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestCounting(t *testing.T) {
	ctx := t.Context()
	c := counting.New(mem.New())
	// A scripted sequence; its counts are exact.
	if _, err := c.Put(ctx, "a", make([]byte, 100), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "a", make([]byte, 7), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}}); err == nil {
		t.Fatal("create of an existing key succeeded")
	}
	for _, r := range []staging.Range{staging.Whole(), staging.Suffix(10), staging.Bytes(5, 20), staging.Suffix(1000)} {
		if _, _, err := c.Get(ctx, "a", r); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Get(ctx, "missing", staging.Whole()); err == nil {
		t.Fatal("get of a missing key succeeded")
	}
	if _, err := c.Head(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Head(canceled, "a"); err == nil {
		t.Fatal("head with a canceled context succeeded")
	}
	id, err := c.CreateMultipart(ctx, "b", staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	etag, err := c.UploadPart(ctx, "b", id, 1, make([]byte, 50))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipart(ctx, "b", id, []staging.CompletedPart{{Number: 1, ETag: etag}}, staging.Conditions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(ctx, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListMultipartUploads(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}

	s := c.Snapshot()
	for _, tc := range []struct {
		op   staging.Op
		want counting.OpCounts
	}{
		// A refused condition and a missing key are answers, not errors.
		{staging.OpPut, counting.OpCounts{Requests: 2, Refused: 1, BytesSent: 107}},
		{staging.OpGet, counting.OpCounts{Requests: 5, Refused: 1, BytesReceived: 100 + 10 + 20 + 100}},
		{staging.OpHead, counting.OpCounts{Requests: 2, Errors: 1}},
		{staging.OpList, counting.OpCounts{Requests: 1}},
		{staging.OpDelete, counting.OpCounts{Requests: 1}},
		{staging.OpCreateMultipart, counting.OpCounts{Requests: 1}},
		{staging.OpUploadPart, counting.OpCounts{Requests: 1, BytesSent: 50}},
		{staging.OpCompleteMultipart, counting.OpCounts{Requests: 1}},
		{staging.OpAbortMultipart, counting.OpCounts{}},
		{staging.OpListUploads, counting.OpCounts{Requests: 1}},
		{staging.OpAny, counting.OpCounts{Requests: 15, Errors: 1, Refused: 2, BytesSent: 157, BytesReceived: 230}},
	} {
		if got := s.Op(tc.op); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.op, got, tc.want)
		}
	}
	if s.Total() != s.Op(staging.OpAny) {
		t.Errorf("Total %+v differs from Op(OpAny)", s.Total())
	}
	if s.GetSuffix != 2 || s.GetRange != 1 {
		t.Errorf("GetSuffix %d GetRange %d, want 2 and 1", s.GetSuffix, s.GetRange)
	}

	// A header read is exactly one suffix Get.
	c.Reset()
	if _, _, err := c.Get(ctx, "a", staging.Suffix(16)); err != nil {
		t.Fatal(err)
	}
	d := c.Snapshot().Sub(counting.Counts{})
	if d.GetSuffix != 1 || d.Total().Requests != 1 || d.Op(staging.OpGet).BytesReceived != 16 {
		t.Errorf("after Reset and one suffix get: %v, GetSuffix %d", d, d.GetSuffix)
	}
	before := c.Snapshot()
	if _, err := c.Head(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if diff := c.Snapshot().Sub(before); diff.Total().Requests != 1 || diff.Op(staging.OpHead).Requests != 1 || diff.GetSuffix != 0 {
		t.Errorf("Sub: %v", diff)
	}
}
