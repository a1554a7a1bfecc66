package volume

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestPolicyDecode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  string
	}{
		{`{"version":1,"keep":3,"keep_for":"1h0m0s"}`, Policy{3, time.Hour}, ""},
		{`{"version":1,"keep":0,"keep_for":"0s"}`, Policy{0, 0}, ""},
		{`{"version":2,"keep":3,"keep_for":"1h"}`, Policy{}, "version 2"},
		{`{"version":1,"keep":-1,"keep_for":"1h"}`, Policy{}, "keep -1"},
		{`{"version":1,"keep":3,"keep_for":"-1h"}`, Policy{}, "keep_for -1h"},
		{`{"version":1,"keep":3,"keep_for":"soon"}`, Policy{}, `keep_for "soon"`},
		{`{"version":1,"keep":3}`, Policy{}, `keep_for ""`},
		{`[]`, Policy{}, "malformed"},
	} {
		p, err := DecodePolicy([]byte(tc.in))
		if tc.err == "" {
			if err != nil || p != tc.want {
				t.Errorf("DecodePolicy(%s) = %v, %v; want %v", tc.in, p, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrBadPolicy) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("DecodePolicy(%s) = %v; want ErrBadPolicy saying %q", tc.in, err, tc.err)
		}
	}
}

// A policy is created once (If-None-Match) and replaced only on the ETag
// read (If-Match): two changes at once, one wins and the other is refused.
func TestPolicyReadWrite(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p, etag, stored, err := ReadPolicy(ctx, st, "v/")
	if err != nil || stored || p != DefaultPolicy || etag != "" {
		t.Fatalf("ReadPolicy of a volume without one = %v %q %v %v; want the default", p, etag, stored, err)
	}
	if err := WritePolicy(ctx, st, "v/", Policy{Keep: 5}, ""); err != nil {
		t.Fatal(err)
	}
	if err := WritePolicy(ctx, st, "v/", Policy{Keep: 6}, ""); !errors.Is(err, staging.ErrPrecondition) {
		t.Fatalf("a second creation: %v; want ErrPrecondition", err)
	}
	p, etag, stored, err = ReadPolicy(ctx, st, "v/")
	if err != nil || !stored || p != (Policy{Keep: 5}) {
		t.Fatalf("ReadPolicy = %v %v %v", p, stored, err)
	}
	if err := WritePolicy(ctx, st, "v/", Policy{Keep: 7, KeepFor: 24 * time.Hour}, etag); err != nil {
		t.Fatal(err)
	}
	if err := WritePolicy(ctx, st, "v/", Policy{Keep: 8}, etag); !errors.Is(err, staging.ErrPrecondition) {
		t.Fatalf("a change on an old ETag: %v; want ErrPrecondition", err)
	}
	if err := WritePolicy(ctx, st, "v/", Policy{Keep: -2}, etag); !errors.Is(err, ErrBadPolicy) {
		t.Fatalf("a bad policy stored: %v", err)
	}
	if p, _, _, _ := ReadPolicy(ctx, st, "v/"); p != (Policy{Keep: 7, KeepFor: 24 * time.Hour}) {
		t.Fatalf("policy %v", p)
	}
}

func FuzzDecodePolicy(f *testing.F) {
	f.Add(EncodePolicy(DefaultPolicy))
	f.Add([]byte(`{"version":1,"keep":99999999999,"keep_for":"87600000h"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePolicy(b)
		if err != nil {
			return
		}
		if p.Check() != nil {
			t.Fatalf("decoded a policy out of bounds: %v", p)
		}
		q, err := DecodePolicy(EncodePolicy(p))
		if err != nil || q != p {
			t.Fatalf("round trip of %v: %v %v", p, q, err)
		}
	})
}
