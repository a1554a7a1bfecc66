package faulty_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// failures runs n Puts of keys "<prefix><i>" and returns the indexes that failed.
func failures(t *testing.T, f *faulty.Store, keys []string) []int {
	t.Helper()
	var out []int
	for i, k := range keys {
		_, err := f.Put(t.Context(), k, []byte("x"), staging.PutOptions{})
		if err != nil {
			if !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("put %s: %v, want an injected error", k, err)
			}
			out = append(out, i)
		}
	}
	return out
}

func keys(n int, format string) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func TestFaultsSelectors(t *testing.T) {
	mixed := []string{"a/inode", "a/1.0", "b/inode", "a/2.0", "c/inode", "b/1.0"}
	for _, tc := range []struct {
		name string
		rule faulty.Rule
		keys []string
		want []int
	}{
		{"every put", faulty.Rule{Op: staging.OpPut}, keys(3, "k%d"), []int{0, 1, 2}},
		{"any op", faulty.Rule{}, keys(2, "k%d"), []int{0, 1}},
		{"other op", faulty.Rule{Op: staging.OpGet}, keys(3, "k%d"), nil},
		{"nth", faulty.Rule{Op: staging.OpPut, Nth: 3}, keys(5, "k%d"), []int{2}},
		{"suffix", faulty.Rule{KeySuffix: "/inode"}, mixed, []int{0, 2, 4}},
		{"prefix", faulty.Rule{KeyPrefix: "a/"}, mixed, []int{0, 1, 3}},
		{"nth with suffix", faulty.Rule{Op: staging.OpPut, KeySuffix: "/inode", Nth: 2}, mixed, []int{2}},
		{"predicate", faulty.Rule{Match: func(k string) bool { return strings.HasSuffix(k, ".0") }}, mixed, []int{1, 3, 5}},
		{"times", faulty.Rule{KeyPrefix: "k", Times: 2}, keys(5, "k%d"), []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := faulty.New(mem.New(), 1)
			f.Add(tc.rule)
			got := failures(t, f, tc.keys)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("failed %v, want %v", got, tc.want)
			}
			if f.Injected() != len(tc.want) {
				t.Fatalf("Injected() = %d, want %d", f.Injected(), len(tc.want))
			}
		})
	}
}

func TestFaultsFraction(t *testing.T) {
	run := func(seed int64) []int {
		f := faulty.New(mem.New(), seed)
		f.Add(faulty.Rule{Op: staging.OpPut, Fraction: 0.3})
		return failures(t, f, keys(1000, "k%d"))
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Fatalf("one seed failed different requests")
	}
	if slices.Equal(a, c) {
		t.Fatalf("two seeds failed the same requests")
	}
	// 1000 draws at 0.3: far outside [200, 400] has odds below 1e-10.
	if len(a) < 200 || len(a) > 400 {
		t.Fatalf("%d of 1000 failed at fraction 0.3", len(a))
	}
}

func TestFaultsKinds(t *testing.T) {
	ctx := t.Context()
	t.Run("error is not applied", func(t *testing.T) {
		m := mem.New()
		f := faulty.New(m, 1)
		f.Add(faulty.Rule{Op: staging.OpPut, Kind: faulty.Error})
		_, err := f.Put(ctx, "k", []byte("x"), staging.PutOptions{})
		var ie *faulty.InjectedError
		if !errors.Is(err, faulty.ErrInjected) || !errors.As(err, &ie) || ie.Op != staging.OpPut || ie.Key != "k" {
			t.Fatalf("put: %v", err)
		}
		if m.Len() != 0 {
			t.Fatalf("a failed put was applied")
		}
	})
	t.Run("lost answer is applied", func(t *testing.T) {
		m := mem.New()
		f := faulty.New(m, 1)
		f.Add(faulty.Rule{Op: staging.OpPut, Kind: faulty.LostAnswer})
		_, err := f.Put(ctx, "k", []byte("data"), staging.PutOptions{})
		if !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("put: %v", err)
		}
		data, _, err := f.Get(ctx, "k", staging.Whole())
		if err != nil || string(data) != "data" {
			t.Fatalf("get after a lost answer: %q, %v", data, err)
		}
	})
	t.Run("lost answer of a delete", func(t *testing.T) {
		m := mem.New()
		f := faulty.New(m, 1)
		if _, err := f.Put(ctx, "k", []byte("data"), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		f.Add(faulty.Rule{Op: staging.OpDelete, Kind: faulty.LostAnswer})
		if err := f.Delete(ctx, "k"); !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("delete: %v", err)
		}
		if _, err := f.Head(ctx, "k"); !errors.Is(err, staging.ErrNotFound) {
			t.Fatalf("head after a lost delete: %v", err)
		}
	})
	t.Run("timeout with delay", func(t *testing.T) {
		m := mem.New()
		f := faulty.New(m, 1)
		f.Add(faulty.Rule{Op: staging.OpHead, Kind: faulty.Timeout, Delay: 20 * time.Millisecond})
		start := time.Now()
		_, err := f.Head(ctx, "k")
		if !errors.Is(err, faulty.ErrInjected) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("head: %v", err)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Fatalf("timed out after %v, before the delay", d)
		}
	})
	t.Run("timeout until ctx ends", func(t *testing.T) {
		f := faulty.New(mem.New(), 1)
		f.Add(faulty.Rule{Op: staging.OpGet, Kind: faulty.Timeout})
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(10*time.Millisecond, cancel)
		_, _, err := f.Get(cctx, "k", staging.Whole())
		if !errors.Is(err, faulty.ErrInjected) || !errors.Is(err, context.Canceled) {
			t.Fatalf("get: %v", err)
		}
	})
}

func TestFaultsRemove(t *testing.T) {
	f := faulty.New(mem.New(), 1)
	id := f.Add(faulty.Rule{Op: staging.OpPut})
	f.Add(faulty.Rule{Op: staging.OpHead})
	if got := failures(t, f, keys(1, "k%d")); len(got) != 1 {
		t.Fatalf("put with the rule: failed %v", got)
	}
	if !f.Remove(id) || f.Remove(id) {
		t.Fatalf("Remove reported wrongly")
	}
	if got := failures(t, f, keys(1, "k%d")); len(got) != 0 {
		t.Fatalf("put after removal failed")
	}
	if _, err := f.Head(t.Context(), "k0"); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("the other rule went too: %v", err)
	}
	f.Clear()
	if _, err := f.Head(t.Context(), "k0"); err != nil {
		t.Fatalf("head after Clear: %v", err)
	}
	if f.Injected() != 2 {
		t.Fatalf("Injected() = %d, want 2", f.Injected())
	}
}

// Every operation goes through the rules.
func TestFaultsEveryOp(t *testing.T) {
	ctx := t.Context()
	f := faulty.New(mem.New(), 1)
	f.Add(faulty.Rule{})
	calls := map[staging.Op]func() error{
		staging.OpPut:    func() error { _, err := f.Put(ctx, "k", nil, staging.PutOptions{}); return err },
		staging.OpGet:    func() error { _, _, err := f.Get(ctx, "k", staging.Whole()); return err },
		staging.OpHead:   func() error { _, err := f.Head(ctx, "k"); return err },
		staging.OpList:   func() error { _, err := f.List(ctx, "", "", 0); return err },
		staging.OpDelete: func() error { return f.Delete(ctx, "k") },
		staging.OpCreateMultipart: func() error {
			_, err := f.CreateMultipart(ctx, "k", staging.PutOptions{})
			return err
		},
		staging.OpUploadPart: func() error { _, err := f.UploadPart(ctx, "k", "u", 1, nil); return err },
		staging.OpCompleteMultipart: func() error {
			_, err := f.CompleteMultipart(ctx, "k", "u", nil, staging.Conditions{})
			return err
		},
		staging.OpAbortMultipart: func() error { return f.AbortMultipart(ctx, "k", "u") },
		staging.OpListUploads:    func() error { _, err := f.ListMultipartUploads(ctx, ""); return err },
	}
	for op, call := range calls {
		var ie *faulty.InjectedError
		if err := call(); !errors.As(err, &ie) || ie.Op != op {
			t.Errorf("%s: %v, want an injected error of %s", op, err, op)
		}
	}
}
