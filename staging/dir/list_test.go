package dir_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// putAll stores every key (its own name as its bytes) with a few writers.
func putAll(tb testing.TB, s staging.Store, keys []string) {
	tb.Helper()
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 4 {
		wg.Go(func() {
			for k := range work {
				if _, err := s.Put(tb.Context(), k, []byte(k), staging.PutOptions{}); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		tb.Fatalf("put: %v", firstErr)
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// putTree stores the keys t/<aa>/<bb>/<ccc> for aa below as, bb below bs
// and ccc from 000 to 099, and returns them sorted. The first folder's
// objects are stored with Put; every other folder gets hard links to its
// files (same names, same records), which are valid objects of their keys
// and thousands of times cheaper to make.
func putTree(tb testing.TB, d *dir.Store, as, bs int) []string {
	tb.Helper()
	var first []string
	for c := range 100 {
		first = append(first, fmt.Sprintf("t/00/00/%03d", c))
	}
	putAll(tb, d, first)
	src := filepath.Join(d.Root(), "t", "00", "00")
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	var keys []string
	for a := range as {
		for b := range bs {
			dst := filepath.Join(d.Root(), "t", fmt.Sprintf("%02d", a), fmt.Sprintf("%02d", b))
			if dst != src {
				if err := os.MkdirAll(dst, 0o700); err != nil {
					tb.Fatal(err)
				}
				for _, e := range ents {
					if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
						tb.Fatal(err)
					}
				}
			}
			for c := range 100 {
				keys = append(keys, fmt.Sprintf("t/%02d/%02d/%03d", a, b, c))
			}
		}
	}
	return keys
}

func newQuickDir(tb testing.TB) *dir.Store {
	tb.Helper()
	d, err := dir.NewWith(tb.TempDir(), dir.Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// A page after startAfter reads the folders on the path to startAfter and
// those holding the page's keys, and no other: not the thousands of keys
// before it, nor those after the page.
func TestDirListReadsOnlyThePath(t *testing.T) {
	d := newQuickDir(t)
	// 10,000 keys: t/<aa>/<bb>/<ccc> with aa 00..09, bb 00..09, ccc 000..099.
	keys := putTree(t, d, 10, 10)
	if all, err := staging.ListAll(t.Context(), d, "t/"); err != nil || !slices.Equal(listKeys(staging.ListPage{Objects: all}), keys) {
		t.Fatalf("the tree lists %d keys (%v), want %d", len(all), err, len(keys))
	}
	var read []string
	dir.SetListHook(d, func(dir string) {
		rel, err := filepath.Rel(d.Root(), dir)
		if err != nil {
			t.Errorf("folder %s outside the root", dir)
		}
		read = append(read, filepath.ToSlash(rel))
	})
	startAfter := "t/03/04/050"
	page, err := d.List(t.Context(), "t/", startAfter, 1000)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(keys, startAfter)
	want := keys[i+1 : i+1+1000]
	var got []string
	for _, o := range page.Objects {
		got = append(got, o.Key)
	}
	if !slices.Equal(got, want) || !page.Truncated {
		t.Fatalf("page after %s: %d keys (%s .. %s), truncated %v; want %d keys (%s .. %s), truncated",
			startAfter, len(got), first(got), last(got), page.Truncated, len(want), want[0], want[len(want)-1])
	}
	// The page ends inside t/04/04: 49 keys of t/03/04, 500 of t/03/05..09,
	// 451 of t/04/00..04.
	wantRead := []string{"t", "t/03", "t/03/04", "t/03/05", "t/03/06", "t/03/07", "t/03/08", "t/03/09",
		"t/04", "t/04/00", "t/04/01", "t/04/02", "t/04/03", "t/04/04"}
	if !slices.Equal(read, wantRead) {
		t.Fatalf("a page after %s read %d folders %v; want %d: %v", startAfter, len(read), read, len(wantRead), wantRead)
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

// Dir lists exactly what the memory store lists, page by page, for random
// trees of keys whose bytes sort differently from their escaped file names
// ('%', '~', '-', '.', bytes above '/' and below it), objects beside folders
// of the same name, and random prefixes (inside segments too), start keys
// and page sizes.
func TestDirListMatchesMem(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []string{"a", "b", "%", "~", "-", ".", "0", "z", "%7E", "a.b", "é"}
	seg := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(3) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for round := range 4 {
		d := newQuickDir(t)
		mem := mem.New()
		set := map[string]bool{}
		for range 150 {
			depth := 1 + rng.IntN(4)
			segs := make([]string, depth)
			for j := range segs {
				segs[j] = seg()
			}
			k := "r/" + strings.Join(segs, "/")
			if staging.ValidateKey(k) == nil {
				set[k] = true
			}
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range set {
				if !yield(k) {
					return
				}
			}
		})
		putAll(t, d, keys)
		putAll(t, mem, keys)
		for range 60 {
			prefix := "r/"
			if k := keys[rng.IntN(len(keys))]; rng.IntN(2) == 0 {
				prefix = k[:2+rng.IntN(len(k)-1)]
			}
			if staging.ValidatePrefix(prefix) != nil {
				continue
			}
			startAfter := ""
			switch rng.IntN(3) {
			case 1:
				startAfter = keys[rng.IntN(len(keys))]
			case 2:
				k := keys[rng.IntN(len(keys))]
				startAfter = k[:1+rng.IntN(len(k))] + alphabet[rng.IntN(len(alphabet))]
			}
			max := 1 + rng.IntN(40)
			for page := 0; ; page++ {
				want, err := mem.List(t.Context(), prefix, startAfter, max)
				if err != nil {
					t.Fatal(err)
				}
				got, err := d.List(t.Context(), prefix, startAfter, max)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(listKeys(got), listKeys(want)) || got.Truncated != want.Truncated {
					t.Fatalf("round %d: list %q after %q max %d: dir %q truncated %v; mem %q truncated %v",
						round, prefix, startAfter, max, listKeys(got), got.Truncated, listKeys(want), want.Truncated)
				}
				if !want.Truncated || page > 50 {
					break
				}
				startAfter = want.Objects[len(want.Objects)-1].Key
			}
		}
	}
}

func listKeys(p staging.ListPage) []string {
	out := make([]string, len(p.Objects))
	for i, o := range p.Objects {
		out[i] = o.Key
	}
	return out
}

// BenchmarkDirListPage lists one page of 1,000 keys from the middle of a
// tree of folders of 100 objects (t/<aa>/<bb>/<ccc>). Its time reports the
// cost of a page; it is meant to stay flat as the tree grows.
func BenchmarkDirListPage(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			if n > 10000 && testing.Short() {
				b.Skip("making 100,000 objects takes long; run without -short")
			}
			d := newQuickDir(b)
			keys := putTree(b, d, max(1, n/10000), min(100, n/100))
			startAfter := keys[max(0, n/2-500)]
			b.ResetTimer()
			for b.Loop() {
				page, err := d.List(b.Context(), "t/", startAfter, 1000)
				if err != nil {
					b.Fatal(err)
				}
				if len(page.Objects) == 0 {
					b.Fatal("empty page")
				}
			}
		})
	}
}
