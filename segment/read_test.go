package segment

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

const prefix = "f/x/"

func keyOf(n ObjectName) string { return prefix + n.String() }

func TestReadStreamObject(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: mem.New()}
	in := testInode(7, FormatStream)
	base := testInode(6, FormatStream)
	tests := []struct {
		name  string
		obj   ObjectName
		fbns  []uint64
		dead  []uint32
		m     int
		base  *Inode
		inode *Inode
	}{
		{"part 0", ObjectName{Cno: 7}, []uint64{1, 2, 3, 1}, []uint32{0}, 2, &base, &in},
		{"part 2", ObjectName{Cno: 7, Part: 2}, []uint64{40, 41}, nil, 1, nil, nil},
		{"no meta", ObjectName{Cno: 7, Part: 3}, []uint64{5}, nil, 0, nil, nil},
		{"no data", ObjectName{Cno: 8}, nil, nil, 3, nil, func() *Inode { i := testInode(8, FormatStream); return &i }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj, sum := streamObject(t, tc.obj, tc.fbns, tc.dead, tc.m, tc.base, tc.inode)
			key := keyOf(tc.obj)
			put(t, st, key, obj)
			st.take()

			h, err := ReadHeader(ctx, st, key, tc.obj, testTag, FormatStream)
			if err != nil {
				t.Fatal(err)
			}
			if g := st.take(); len(g) != 1 || g[0] != staging.Suffix(HeaderSize) {
				t.Fatalf("ReadHeader made requests %+v, want one suffix request", g)
			}
			if h.Name != tc.obj || h.Size() != int64(len(obj)) || h.DataBlocks != uint32(len(tc.fbns)) {
				t.Fatalf("header %+v", h)
			}
			if tc.inode != nil && h.Inode != *tc.inode {
				t.Fatalf("inode %+v", h.Inode)
			}

			meta, err := ReadMeta(ctx, st, key, h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(meta, bytes.Join(testMetas(tc.m), nil)) {
				t.Fatal("meta region differs")
			}
			if g := st.take(); len(g) != min(tc.m, 1) || (tc.m > 0 && g[0] != h.MetaRange()) {
				t.Fatalf("ReadMeta made requests %+v, want exactly the meta region", g)
			}

			got, err := ReadSummary(ctx, st, key, h)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(sum) {
				t.Fatalf("%d summary entries, want %d", len(got), len(sum))
			}
			for i := range sum {
				if got[i] != sum[i] {
					t.Fatalf("entry %d = %+v, want %+v", i, got[i], sum[i])
				}
			}
			if g := st.take(); len(g) != min(len(sum), 1) || (len(sum) > 0 && g[0] != h.SummaryRange()) {
				t.Fatalf("ReadSummary made requests %+v, want exactly the summary", g)
			}

			// Data read by offsets matches the summary's checksums.
			for slot, e := range got {
				b, _, err := st.Get(ctx, key, h.DataRange(uint32(slot), 1))
				if err != nil {
					t.Fatal(err)
				}
				if Checksum(b) != e.CRC || !bytes.Equal(b, testBlock(e.FBN)) {
					t.Fatalf("slot %d holds other bytes", slot)
				}
			}
			st.take()

			d, err := DetectHeader(ctx, st, key, tc.obj, testTag)
			if err != nil {
				t.Fatal(err)
			}
			if d != h {
				t.Fatalf("DetectHeader = %+v, ReadHeader = %+v", d, h)
			}
			if g := st.take(); len(g) != 1 || g[0] != staging.Suffix(HeaderSize) {
				t.Fatalf("DetectHeader of a stream object made %+v, want one suffix request", g)
			}
		})
	}
}

func TestReadPartedObject(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: mem.New()}
	in := testInode(4, FormatParted)
	base := testInode(2, FormatParted)
	tests := []struct {
		name      string
		obj       ObjectName
		key       string
		fbns      []uint64
		m         int
		base      *Inode
		inode     *Inode
		detectGet int // requests DetectHeader makes
	}{
		{"part 0", ObjectName{Cno: 4}, prefix + "0000000004.0", []uint64{3, 4, 5}, 2, &base, &in, 2},
		{"part 1", ObjectName{Cno: 4, Part: 1}, prefix + "0000000004.1", []uint64{6}, 1, nil, nil, 2},
		{"unsuffixed", ObjectName{Cno: 4}, prefix + "0000000004", []uint64{3, 4, 5}, 2, nil, &in, 1},
		// Only a header: both layouts are the same bytes, so the end is read once.
		{"only header", ObjectName{Cno: 4}, prefix + "x/0000000004.0", nil, 0, nil, &in, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj, sum := partedObject(t, tc.obj, tc.fbns, tc.m, tc.base, tc.inode)
			put(t, st, tc.key, obj)
			st.take()

			h, err := ReadHeader(ctx, st, tc.key, tc.obj, testTag, FormatParted)
			if err != nil {
				t.Fatal(err)
			}
			if g := st.take(); len(g) != 1 || g[0] != staging.Bytes(0, HeaderSize) {
				t.Fatalf("ReadHeader made %+v, want one request for the first 256 bytes", g)
			}
			if h.Format != FormatParted || h.Size() != int64(len(obj)) {
				t.Fatalf("header %+v", h)
			}
			meta, err := ReadMeta(ctx, st, tc.key, h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(meta, bytes.Join(testMetas(tc.m), nil)) {
				t.Fatal("meta region differs")
			}
			if tc.m > 0 {
				one, err := ReadMetaBlocks(ctx, st, tc.key, h, uint32(tc.m-1), 1)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(one, testMetas(tc.m)[tc.m-1]) {
					t.Fatal("last meta block differs")
				}
			}
			got, err := ReadSummary(ctx, st, tc.key, h)
			if err != nil {
				t.Fatal(err)
			}
			for i := range sum {
				if got[i] != sum[i] {
					t.Fatalf("entry %d = %+v, want %+v", i, got[i], sum[i])
				}
			}
			st.take()

			d, err := DetectHeader(ctx, st, tc.key, tc.obj, testTag)
			if err != nil {
				t.Fatal(err)
			}
			if d != h {
				t.Fatalf("DetectHeader = %+v, ReadHeader = %+v", d, h)
			}
			if g := st.take(); len(g) != tc.detectGet {
				t.Fatalf("DetectHeader made %+v, want %d requests", g, tc.detectGet)
			}
		})
	}
	// Out-of-range meta blocks are the caller's error, not the object's.
	h, err := ReadHeader(ctx, st, prefix+"0000000004.0", ObjectName{Cno: 4}, testTag, FormatParted)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetaBlocks(ctx, st, prefix+"0000000004.0", h, 1, 2); !errors.Is(err, staging.ErrInvalidRange) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("meta blocks past the end: %v", err)
	}
}

func TestReadHead(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	hd := Head{FileTag: testTag, Inode: testInode(9, FormatStream)}
	b, err := EncodeHead(hd)
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + "inode"
	info, err := st.Put(ctx, key, b, staging.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, ginfo, err := ReadHead(ctx, st, key, testTag)
	if err != nil {
		t.Fatal(err)
	}
	if got.FileTag != hd.FileTag || got.Inode != hd.Inode || ginfo.ETag != info.ETag {
		t.Fatalf("got %+v etag %q, want %+v etag %q", got, ginfo.ETag, hd, info.ETag)
	}
	_, _, err = ReadHead(ctx, st, key, testTag+1)
	wantRefusal(t, err, ErrWrongObject, key)

	b[0] = 'x'
	put(t, st, key, b)
	_, _, err = ReadHead(ctx, st, key, testTag)
	wantRefusal(t, err, ErrBadMagic, key)

	if _, _, err := ReadHead(ctx, st, prefix+"missing/inode", testTag); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("missing head: %v", err)
	}
}

// TestRefusals holds one case per refusal rule, each against the store, each
// asserting its sentinel and that the message names the key.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	name := ObjectName{Cno: 3}
	in := testInode(3, FormatStream)
	stream, _ := streamObject(t, name, []uint64{1, 2}, nil, 1, nil, &in)
	pin := testInode(3, FormatParted)
	parted, _ := partedObject(t, name, []uint64{1, 2}, 1, nil, &pin)
	onlyHeader, _ := partedObject(t, name, nil, 0, nil, &pin)
	onlyStreamHeader, _ := streamObject(t, name, nil, nil, 0, nil, &in)
	part1, _ := streamObject(t, ObjectName{Cno: 3, Part: 1}, []uint64{1}, nil, 0, nil, nil)

	// tail returns stream with its header changed by f (resealed when asked).
	tail := func(f func(h []byte), reseal bool) []byte {
		b := bytes.Clone(stream)
		h := b[len(b)-HeaderSize:]
		f(h)
		if reseal {
			resealHeader(h)
		}
		return b
	}
	read := func(f Format) func(key string) error {
		return func(key string) error {
			_, err := ReadHeader(ctx, st, key, name, testTag, f)
			return err
		}
	}
	detect := func(key string) error {
		_, err := DetectHeader(ctx, st, key, name, testTag)
		return err
	}
	tests := []struct {
		name string
		key  string
		obj  []byte
		read func(key string) error
		want error
	}{
		{"bad magic", "f/x/0000000003.0", tail(func(h []byte) { h[0] = 'c' }, false), read(FormatStream), ErrBadMagic},
		{"bad magic at both ends", "f/x/0000000003.0", bytes.Repeat([]byte{7}, 9000), detect, ErrBadMagic},
		{"bad magic at the start", "f/x/0000000003.0", stream, read(FormatParted), ErrBadMagic},
		{"newer layout version", "f/x/0000000003.0", tail(func(h []byte) { h[8] = 7 }, true), read(FormatStream), ErrUnsupported},
		{"checksum", "f/x/0000000003.0", tail(func(h []byte) { h[hOffDBS+1] ^= 0x30 }, false), read(FormatStream), ErrChecksum},
		{"checksum seen by detect", "f/x/0000000003.0", tail(func(h []byte) { h[100] ^= 1 }, false), detect, ErrChecksum},
		{"impossible field", "f/x/0000000003.0", tail(func(h []byte) { h[hOffInode+17] = 40 }, true), read(FormatStream), ErrInvalid},
		{"object longer than counted", "f/x/0000000003.0", append([]byte{0}, stream...), read(FormatStream), ErrSize},
		{"object shorter than counted", "f/x/0000000003.0", parted[:len(parted)-1], read(FormatParted), ErrSize},
		{"object shorter than a header", "f/x/0000000003.0", stream[len(stream)-100:], read(FormatStream), ErrSize},
		{"empty object", "f/x/0000000003.0", nil, read(FormatParted), ErrSize},
		{"empty object detected", "f/x/0000000003.0", nil, detect, ErrSize},
		{"header counts too many blocks", "f/x/0000000003.0", tail(func(h []byte) { h[hOffN]++ }, true), read(FormatStream), ErrSize},
		{"other part", "f/x/0000000003.0", part1, read(FormatStream), ErrWrongObject},
		{"other checkpoint", "f/x/0000000003.0", tail(func(h []byte) {
			le.PutUint64(h[hOffCno:], 4)
			le.PutUint64(h[hOffInode:], 4)
			le.PutUint64(h[hOffInode+32:], 4)
		}, true), read(FormatStream), ErrWrongObject},
		{"other file", "f/x/0000000003.0", tail(func(h []byte) { h[hOffFileTag] ^= 1 }, true), read(FormatStream), ErrWrongObject},
		{"parted read as stream", "f/x/0000000003.0", onlyHeader, read(FormatStream), ErrFormat},
		{"stream read as parted", "f/x/0000000003.0", onlyStreamHeader, read(FormatParted), ErrFormat},
		{"unsuffixed stream", "f/x/0000000003", onlyStreamHeader, detect, ErrFormat},
		{"parted header at the end of a longer object", "f/x/0000000003.0",
			append(bytes.Clone(parted[HeaderSize:]), parted[:HeaderSize]...), detect, ErrFormat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			put(t, st, tc.key, tc.obj)
			wantRefusal(t, tc.read(tc.key), tc.want, tc.key)
		})
	}

	// A region read after the object under the key was replaced.
	key := "f/x/0000000003.0"
	put(t, st, key, stream)
	h, err := ReadHeader(ctx, st, key, name, testTag, FormatStream)
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, key, stream[:len(stream)-HeaderSize-1])
	_, err = ReadMeta(ctx, st, key, h)
	wantRefusal(t, err, ErrSize, key)
	_, err = ReadSummary(ctx, st, key, h)
	wantRefusal(t, err, ErrSize, key)

	// A damaged summary under a valid header.
	bad := bytes.Clone(stream)
	h2, _ := DecodeHeader(bad[len(bad)-HeaderSize:])
	bad[h2.SummaryOffset()+13] = 0x40
	put(t, st, key, bad)
	_, err = ReadSummary(ctx, st, key, h2)
	wantRefusal(t, err, ErrInvalid, key)
}

func TestUnsupportedOverStore(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	in := testInode(3, FormatStream)
	obj, _ := streamObject(t, ObjectName{Cno: 3}, []uint64{1}, nil, 0, nil, &in)
	obj[len(obj)-HeaderSize+8] = 7
	key := "f/x/0000000003.0"
	put(t, st, key, obj)
	for _, read := range []func() error{
		func() error {
			_, err := ReadHeader(ctx, st, key, ObjectName{Cno: 3}, testTag, FormatStream)
			return err
		},
		func() error { _, err := DetectHeader(ctx, st, key, ObjectName{Cno: 3}, testTag); return err },
	} {
		err := read()
		const want = "object f/x/0000000003.0 has layout version 7; this build reads up to 2"
		if err == nil || err.Error() != want {
			t.Fatalf("got %v, want %q", err, want)
		}
		wantRefusal(t, err, ErrUnsupported, key)
	}
}

func TestStoreErrorsPassThrough(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	key := "f/x/0000000009.0"
	for _, f := range []Format{FormatStream, FormatParted} {
		_, err := ReadHeader(ctx, st, key, ObjectName{Cno: 9}, testTag, f)
		if !errors.Is(err, staging.ErrNotFound) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v: missing object: %v", f, err)
		}
	}
	if _, err := DetectHeader(ctx, st, key, ObjectName{Cno: 9}, testTag); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("detect missing object: %v", err)
	}
	if _, err := ReadHeader(ctx, st, key, ObjectName{Cno: 9}, testTag, 0); !errors.Is(err, ErrFormat) {
		t.Fatalf("reader format 0: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	in := testInode(9, FormatStream)
	obj, _ := streamObject(t, ObjectName{Cno: 9}, nil, nil, 0, nil, &in)
	put(t, st, key, obj)
	if _, err := ReadHeader(cctx, st, key, ObjectName{Cno: 9}, testTag, FormatStream); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

// TestRequestCounts checks the reading strategy against the store's own
// request counter: a header is one suffix Get of 256 bytes, the meta region
// and the summary one ranged Get each of exactly their bytes.
func TestRequestCounts(t *testing.T) {
	ctx := context.Background()
	st := counting.New(mem.New())
	in := testInode(5, FormatStream)
	name := ObjectName{Cno: 5}
	obj, _ := streamObject(t, name, []uint64{1, 2, 3, 4}, []uint32{2}, 3, nil, &in)
	key := keyOf(name)
	put(t, st, key, obj)

	steps := []struct {
		name     string
		run      func(h *Header) error
		suffix   int64
		ranged   int64
		received int64
	}{
		{"header", func(h *Header) error {
			var err error
			*h, err = ReadHeader(ctx, st, key, name, testTag, FormatStream)
			return err
		}, 1, 0, HeaderSize},
		{"meta", func(h *Header) error { _, err := ReadMeta(ctx, st, key, *h); return err }, 0, 1, 3 * testMBS},
		{"summary", func(h *Header) error { _, err := ReadSummary(ctx, st, key, *h); return err }, 0, 1, 4 * SummaryEntrySize},
	}
	var h Header
	for _, s := range steps {
		before := st.Snapshot()
		if err := s.run(&h); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		d := st.Snapshot().Sub(before)
		get := d.Op(staging.OpGet)
		if get.Requests != 1 || d.Total().Requests != 1 || d.GetSuffix != s.suffix || d.GetRange != s.ranged || get.BytesReceived != s.received {
			t.Fatalf("%s: %v", s.name, d)
		}
	}
}
