package segment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// ReadHeaderMeta gives what ReadHeader and ReadMeta give, in one round trip
// when the tail is within the guess (one suffix request for a stream
// object; a parted object's header beside it), in two otherwise; and the
// tail's length, for the next guess.
func TestReadHeaderMeta(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: mem.New()}
	sin, pin := testInode(7, FormatStream), testInode(7, FormatParted)
	type object struct {
		f    Format
		name ObjectName
		obj  []byte
		m    int
	}
	var objects []object
	for _, c := range []struct {
		name ObjectName
		fbns []uint64
		m    int
		in   *Inode
	}{
		{ObjectName{Cno: 7}, []uint64{1, 2, 3}, 2, nil},
		{ObjectName{Cno: 7, Part: 2}, []uint64{40, 41}, 1, nil},
		{ObjectName{Cno: 7, Part: 3}, []uint64{5}, 0, nil},
		{ObjectName{Cno: 7, Part: 4}, nil, 3, nil},
	} {
		var in *Inode
		if c.name.Part == 0 {
			in = &sin
		}
		obj, _ := streamObject(t, c.name, c.fbns, nil, c.m, nil, in)
		objects = append(objects, object{FormatStream, c.name, obj, c.m})
		if c.name.Part == 0 {
			in = &pin
		}
		obj, _ = partedObject(t, c.name, c.fbns, c.m, nil, in)
		objects = append(objects, object{FormatParted, c.name, obj, c.m})
	}
	for _, o := range objects {
		key := fmt.Sprintf("%s%v/%s", prefix, o.f, o.name)
		put(t, st, key, o.obj)
		h0, err := ReadHeader(ctx, st, key, o.name, testTag, o.f)
		if err != nil {
			t.Fatal(err)
		}
		tail := h0.Size() - h0.MetaOffset(0) // from the meta region on
		for _, guess := range []int64{0, HeaderSize, tail - 1, tail, tail + 1, 1 << 20, 2 << 20} {
			t.Run(fmt.Sprintf("%v/%s/guess %d", o.f, o.name, guess), func(t *testing.T) {
				st.take()
				h, meta, need, err := ReadHeaderMeta(ctx, st, key, o.name, testTag, o.f, guess)
				if err != nil {
					t.Fatal(err)
				}
				if h != h0 || need != tail {
					t.Fatalf("header %+v, tail %d; want %+v, %d", h, need, h0, tail)
				}
				if !bytes.Equal(meta, bytes.Join(testMetas(o.m), nil)) || cap(meta) != len(meta) && o.m > 0 {
					t.Fatalf("meta region differs (%d bytes, cap %d)", len(meta), cap(meta))
				}
				g := st.take()
				asked := min(max(guess, HeaderSize), MaxTailGuess)
				fits := o.m == 0 || tail <= asked
				want := map[Format]int{FormatStream: 1, FormatParted: 2}[o.f]
				if o.f == FormatParted && asked == HeaderSize {
					want = 1 // the header alone
				}
				if !fits {
					want++
				}
				if len(g) != want {
					t.Fatalf("%d requests %+v, want %d", len(g), g, want)
				}
				if o.f == FormatStream && g[0] != staging.Suffix(asked) {
					t.Fatalf("first request %+v, want the last %d bytes", g[0], asked)
				}
				if !fits && g[len(g)-1] != h.MetaRange() {
					t.Fatalf("last request %+v, want the meta region %+v", g[len(g)-1], h.MetaRange())
				}
			})
		}
	}
}

// A store that answers the tail with other bytes than asked, or a parted
// object replaced between its two answers, is refused, never sliced.
func TestReadHeaderMetaRefusals(t *testing.T) {
	ctx := context.Background()
	name := ObjectName{Cno: 7, Part: 2}
	sobj, _ := streamObject(t, name, []uint64{1, 2}, nil, 2, nil, nil)
	pobj, _ := partedObject(t, name, []uint64{1, 2}, 2, nil, nil)
	short := &shortTail{Store: mem.New()}
	put(t, short, "s", sobj)
	put(t, short, "p", pobj)
	_, _, _, err := ReadHeaderMeta(ctx, short, "s", name, testTag, FormatStream, 1<<10)
	wantRefusal(t, err, ErrSize, "s")
	_, _, _, err = ReadHeaderMeta(ctx, short, "p", name, testTag, FormatParted, 1<<10)
	wantRefusal(t, err, ErrSize, "p")

	// A parted object whose tail comes from a longer object.
	swapped := &swapTail{Store: mem.New()}
	put(t, swapped, "p", pobj)
	longer, _ := partedObject(t, name, []uint64{1, 2, 3}, 2, nil, nil)
	put(t, swapped, "q", longer)
	_, _, _, err = ReadHeaderMeta(ctx, swapped, "p", name, testTag, FormatParted, 1<<10)
	wantRefusal(t, err, ErrSize, "p")

	// The store's own errors pass through, wrapped.
	boom := errors.New("link down")
	_, _, _, err = ReadHeaderMeta(ctx, &failingStore{Store: mem.New(), err: boom}, "p", name, testTag, FormatParted, 1<<10)
	if !errors.Is(err, boom) {
		t.Fatalf("store error: %v", err)
	}
	if _, _, _, err := ReadHeaderMeta(ctx, mem.New(), "p", name, testTag, 0, 1<<10); !errors.Is(err, ErrFormat) {
		t.Fatalf("no format: %v", err)
	}
}

// shortTail answers a suffix request with one byte less than it should.
type shortTail struct{ staging.Store }

func (s *shortTail) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	b, info, err := s.Store.Get(ctx, key, r)
	if r.Suffix > 0 && len(b) > HeaderSize {
		b = b[1:]
	}
	return b, info, err
}

// swapTail answers a suffix request of "p" with the tail of "q".
type swapTail struct{ staging.Store }

func (s *swapTail) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if key == "p" && r.Suffix > 0 {
		key = "q"
	}
	return s.Store.Get(ctx, key, r)
}

// failingStore fails every Get with err.
type failingStore struct {
	staging.Store
	err error
}

func (s *failingStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	return nil, staging.ObjectInfo{}, s.err
}

// FuzzReadHeaderMeta: whatever an object holds, ReadHeaderMeta refuses it or
// gives exactly what ReadHeader and ReadMeta give, whatever the guess.
func FuzzReadHeaderMeta(f *testing.F) {
	name := ObjectName{Cno: 7, Part: 2}
	for _, parted := range []bool{false, true} {
		var obj []byte
		if parted {
			obj, _ = partedObject(f, name, []uint64{1, 2, 3}, 2, nil, nil)
		} else {
			obj, _ = streamObject(f, name, []uint64{1, 2, 3}, nil, 2, nil, nil)
		}
		for _, guess := range []int64{0, 300, 1100, 1 << 20} {
			f.Add(obj, guess, parted)
		}
	}
	f.Fuzz(func(t *testing.T, obj []byte, guess int64, parted bool) {
		ctx := context.Background()
		st := mem.New()
		if _, err := st.Put(ctx, "k", obj, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		fm := FormatStream
		if parted {
			fm = FormatParted
		}
		h, meta, need, err := ReadHeaderMeta(ctx, st, "k", name, testTag, fm, guess)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error is no refusal: %v", err)
			}
			return
		}
		h0, err := ReadHeader(ctx, st, "k", name, testTag, fm)
		if err != nil {
			t.Fatalf("ReadHeaderMeta took what ReadHeader refuses: %v", err)
		}
		meta0, err := ReadMeta(ctx, st, "k", h0)
		if err != nil {
			t.Fatal(err)
		}
		if h != h0 || !bytes.Equal(meta, meta0) || need != h0.Size()-h0.MetaOffset(0) {
			t.Fatalf("header %+v, %d meta bytes, tail %d; want %+v, %d, %d", h, len(meta), need, h0, len(meta0), h0.Size()-h0.MetaOffset(0))
		}
	})
}
