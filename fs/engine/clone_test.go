package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

const cloneFiles = "vol/f/"

func cloneOpts(p Params, id string) Options {
	return Options{Params: p, FileID: id, FilesPrefix: cloneFiles}
}

func createIn(t *testing.T, st staging.Store, id string, p Params) *File {
	t.Helper()
	f, err := Create(context.Background(), st, cloneFiles+id+"/", cloneOpts(p, id))
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return f
}

func openIn(t *testing.T, st staging.Store, id string, p Params) *File {
	t.Helper()
	// No FilesPrefix: it is taken from the prefix, as tools that know only
	// a file's prefix do.
	f, err := Open(context.Background(), st, cloneFiles+id+"/", Options{Params: p, FileID: id})
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	return f
}

func writeFlush(t *testing.T, f *File, data []byte, off int64) {
	t.Helper()
	if _, err := f.WriteAt(context.Background(), data, off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes, want %d; first difference at %d", what, len(got), len(want), i)
	}
}

// A copy reads the source's bytes, in this process and reopened; each
// changes on its own afterwards; a copy of a copy and an older checkpoint of
// the copy read right too.
func TestCloneReadsAndDiverges(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		t.Run(fm.String(), func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			p := smallParams(fm)
			x := createIn(t, st, "x", p)
			want := pattern(200<<10+77, 1)
			writeFlush(t, x, want, 0)

			d := createIn(t, st, "d", p)
			if err := d.CloneFrom(ctx, x); err != nil {
				t.Fatalf("clone: %v", err)
			}
			mustEqual(t, "copy", readAll(t, d), want)
			if s := d.Stats(); s.Clones != 1 {
				t.Fatalf("Clones = %d", s.Clones)
			}
			cloneCno := d.Stat().Cno

			// The source is overwritten, the copy written in part.
			newX := pattern(len(want), 2)
			writeFlush(t, x, newX, 0)
			dWant := bytes.Clone(want)
			patch := pattern(5000, 3)
			copy(dWant[70000:], patch)
			dWant = append(dWant, pattern(3000, 4)...)
			if _, err := d.WriteAt(ctx, dWant[len(want):], int64(len(want))); err != nil {
				t.Fatal(err)
			}
			writeFlush(t, d, patch, 70000)
			mustEqual(t, "copy after writes", readAll(t, d), dWant)
			mustEqual(t, "source after the copy's writes", readAll(t, x), newX)

			d2 := openIn(t, st, "d", p)
			mustEqual(t, "copy reopened", readAll(t, d2), dWant)
			x2 := openIn(t, st, "x", p)
			mustEqual(t, "source reopened", readAll(t, x2), newX)

			old, err := OpenAt(ctx, st, cloneFiles+"d/", cloneCno, Options{Params: p, FileID: "d"})
			if err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "the copy's first checkpoint", readAll(t, old), want)

			// A copy of the copy, then the copy changes again.
			e := createIn(t, st, "e", p)
			if err := e.CloneFrom(ctx, d2); err != nil {
				t.Fatalf("copy of a copy: %v", err)
			}
			writeFlush(t, d2, pattern(len(dWant), 5), 0)
			e2 := openIn(t, st, "e", p)
			mustEqual(t, "copy of a copy reopened", readAll(t, e2), dWant)
			lin, err := e2.space.Lineage(ctx, e2.linCno.Load())
			if err != nil || len(lin.Entries) != 2 || lin.Entries[0].FileID != "x" || lin.Entries[1].FileID != "d" {
				t.Fatalf("lineage of the copy of a copy: %+v, %v", lin, err)
			}
			for _, id := range []string{"x", "d"} {
				if _, _, err := st.Get(ctx, volume.RefKey(cloneFiles+id+"/", "e"), staging.Range{}); err != nil {
					t.Fatalf("marker of e under %s: %v", id, err)
				}
			}
		})
	}
}

// A copy costs the same requests whatever the size of the file.
func TestCloneRequestsIndependentOfSize(t *testing.T) {
	ctx := context.Background()
	var counts []int64
	for _, n := range []int{64 << 10, 4 << 20} {
		cs := counting.New(mem.New())
		p := smallParams(segment.FormatStream)
		p.MaxObjectBytes = 256 << 10
		x := createIn(t, cs, "x", p)
		writeFlush(t, x, pattern(n, 1), 0)
		// Read once so that the source's head copy is known stored.
		d := createIn(t, cs, "d", p)
		before := cs.Snapshot().Total()
		if err := d.CloneFrom(ctx, x); err != nil {
			t.Fatal(err)
		}
		got := cs.Snapshot().Total()
		reqs, bytesIn := got.Requests-before.Requests, got.BytesSent-before.BytesSent
		if bytesIn > 8<<10 {
			t.Fatalf("a copy of %d bytes sent %d bytes", n, bytesIn)
		}
		counts = append(counts, reqs)
	}
	if counts[0] != counts[1] {
		t.Fatalf("a copy of 64 KiB made %d requests, of 4 MiB %d", counts[0], counts[1])
	}
	if counts[0] > 6 {
		t.Fatalf("a copy made %d requests", counts[0])
	}
}

// Unflushed writes of the source are in the copy: it is published first.
func TestCloneSourceWithUnflushedWrites(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	x := createIn(t, st, "x", p)
	want := pattern(30000, 1)
	writeFlush(t, x, want, 0)
	more := pattern(9000, 2)
	if _, err := x.WriteAt(ctx, more, 25000); err != nil {
		t.Fatal(err)
	}
	want = append(want[:25000], more...)
	d := createIn(t, st, "d", p)
	if err := d.CloneFrom(ctx, x); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "copy of a dirty source", readAll(t, openIn(t, st, "d", p)), want)
	if x.Stat().Dirty {
		t.Fatal("the source is still dirty")
	}
}

// What cannot be copied by reference says so, and changes nothing.
func TestCloneUnsupported(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	x := createIn(t, st, "x", p)
	writeFlush(t, x, pattern(3000, 1), 0)

	full := createIn(t, st, "full", p)
	writeFlush(t, full, []byte("abc"), 0)
	walP := p
	walP.WAL = true
	walFile := createIn(t, st, "walfile", walP)
	otherBS := p
	otherBS.DataBlockSize = 1024
	bs := createIn(t, st, "bs", otherBS)
	elsewhere, err := Create(ctx, st, "other/f/y/", Options{Params: p, FileID: "y"})
	if err != nil {
		t.Fatal(err)
	}
	empty := createIn(t, st, "empty", p)
	for _, c := range []struct {
		name string
		dst  *File
		src  *File
	}{
		{"not empty", full, x},
		{"the same file", x, x},
		{"the copy has the WAL", walFile, x},
		{"another block size", bs, x},
		{"another volume", elsewhere, x},
		{"an empty source", createIn(t, st, "d0", p), empty},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.dst.Stat()
			err := c.dst.CloneFrom(ctx, c.src)
			if !errors.Is(err, ErrCloneUnsupported) {
				t.Fatalf("got %v, want ErrCloneUnsupported", err)
			}
			if after := c.dst.Stat(); after.Size != before.Size || after.Cno != before.Cno {
				t.Fatalf("the file changed: %+v -> %+v", before, after)
			}
		})
	}
}

// A copy MaxLineage deep is refused; one less is made.
func TestCloneDepthBounded(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	prev := createIn(t, st, "c0", p)
	want := pattern(2000, 1)
	writeFlush(t, prev, want, 0)
	for i := 1; ; i++ {
		next := createIn(t, st, fmt.Sprintf("c%d", i), p)
		err := next.CloneFrom(ctx, prev)
		if i > segment.MaxLineage {
			if !errors.Is(err, ErrCloneUnsupported) {
				t.Fatalf("copy %d deep: %v", i, err)
			}
			break
		}
		if err != nil {
			t.Fatalf("copy %d deep: %v", i, err)
		}
		mustEqual(t, fmt.Sprintf("copy %d deep", i), readAll(t, next), want)
		prev = next
	}
}

// A lineage object that names files outside the volume is refused, not
// followed.
func TestCloneForeignLineageRefused(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	x := createIn(t, st, "x", p)
	writeFlush(t, x, pattern(3000, 1), 0)
	d := createIn(t, st, "d", p)
	if err := d.CloneFrom(ctx, x); err != nil {
		t.Fatal(err)
	}
	cno := d.linCno.Load()
	key := segment.LineageKey(cloneFiles+"d/", cno)
	b, _, err := st.Get(ctx, key, staging.Range{})
	if err != nil {
		t.Fatal(err)
	}
	// The id "x" becomes "." + "." is refused by the codec; a valid id of
	// a file that is not there is an error on read, never other bytes.
	bad := bytes.Replace(b, []byte{1, 'x'}, []byte{1, '.'}, 1)
	le := segment.Checksum(bad[:len(bad)-4])
	bad[len(bad)-4], bad[len(bad)-3], bad[len(bad)-2], bad[len(bad)-1] = byte(le), byte(le>>8), byte(le>>16), byte(le>>24)
	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, key, bad, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	d2 := openIn(t, st, "d", p)
	buf := make([]byte, 100)
	if _, err := d2.ReadAt(ctx, buf, 0); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("read through a lineage naming %q: %v", ".", err)
	}
}

// A copy under a failing store: each request the copy makes fails once (an
// error, or an answer lost after it landed). A copy that returns nil reads as
// the source; one that fails leaves the file empty and writable, and what a
// later write publishes reads back; the source never changes.
func TestCloneUnderFaults(t *testing.T) {
	for _, r := range []faulty.Rule{
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "x/" + volume.RefsDir, Nth: 1, Kind: faulty.Error},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "x/" + volume.RefsDir, Nth: 1, Kind: faulty.LostAnswer},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "d/" + segment.LineageDir, Nth: 1, Kind: faulty.Error},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "d/" + segment.LineageDir, Nth: 1, Kind: faulty.LostAnswer},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "d/", KeySuffix: ".0", Nth: 1, Kind: faulty.Error},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "d/", KeySuffix: ".0", Nth: 1, Kind: faulty.LostAnswer},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "d/", KeySuffix: "/inode", Nth: 1, Kind: faulty.Error},
		{Op: staging.OpPut, KeyPrefix: cloneFiles + "d/", KeySuffix: "/inode", Nth: 1, Kind: faulty.LostAnswer},
	} {
		t.Run(fmt.Sprintf("%s %s%s %s", r.Op, r.KeyPrefix, r.KeySuffix, r.Kind), func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			faults := faulty.New(mem, 1)
			p := smallParams(segment.FormatStream)
			x := createIn(t, faults, "x", p)
			want := pattern(40000, 1)
			writeFlush(t, x, want, 0)
			d := createIn(t, faults, "d", p)
			faults.Add(r)
			err := d.CloneFrom(ctx, x)
			if err == nil {
				mustEqual(t, "copy", readAll(t, d), want)
				mustEqual(t, "copy reopened", readAll(t, openIn(t, mem, "d", p)), want)
			} else {
				t.Logf("copy failed: %v", err)
				if d.Size() != 0 {
					t.Fatalf("a failed copy left %d bytes", d.Size())
				}
				own := pattern(3000, 9)
				writeFlush(t, d, own, 0)
				mustEqual(t, "the file after a failed copy", readAll(t, openIn(t, mem, "d", p)), own)
			}
			mustEqual(t, "source", readAll(t, openIn(t, mem, "x", p)), want)
		})
	}
}

// A lineage that fails to load fails the read that needed it, and is read
// again by the next one: a failure is not kept.
func TestCloneLineageReadFailsOnce(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	p := smallParams(segment.FormatStream)
	x := createIn(t, mem, "x", p)
	want := pattern(40000, 1)
	writeFlush(t, x, want, 0)
	d := createIn(t, mem, "d", p)
	if err := d.CloneFrom(ctx, x); err != nil {
		t.Fatal(err)
	}
	faults := faulty.New(mem, 1)
	faults.Add(faulty.Rule{Op: staging.OpGet, KeyPrefix: cloneFiles + "d/" + segment.LineageDir, Nth: 1, Kind: faulty.Error})
	d2 := openIn(t, faults, "d", p)
	buf := make([]byte, len(want))
	if _, err := d2.ReadAt(ctx, buf, 0); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("first read: %v, want the injected error", err)
	}
	mustEqual(t, "second read", readAll(t, d2), want)
}

// A copy made again of the version an earlier copy took (a copy in pieces)
// is of that version, whatever the source shows by then: another writer
// rewrote it, shorter, and this one's engine of it read that head. The
// source shows the version until it changes; a new copy takes the newer.
func TestCloneAgainTakesTheVersion(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatStream)
	x := createIn(t, st, "x", p)
	v1 := pattern(200<<10+77, 1)
	writeFlush(t, x, v1, 0)
	d := createIn(t, st, "d", p)
	v, err := d.CloneTaking(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if v.Size() != int64(len(v1)) || !x.Shows(v) {
		t.Fatalf("the version taken: %d bytes, shown by the source %v; want %d, shown", v.Size(), x.Shows(v), len(v1))
	}
	if err := d.Truncate(ctx, 100<<10); err != nil { // a first piece
		t.Fatal(err)
	}
	if _, err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	other := openIn(t, st, "x", p)
	if err := other.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	v2 := pattern(3000, 2)
	writeFlush(t, other, v2, 0)
	if _, err := x.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if x.Shows(v) {
		t.Fatal("the source shows the version taken after it was rewritten")
	}

	if err := d.Truncate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.CloneAgain(ctx, x, v); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "the copy made again", readAll(t, openIn(t, st, "d", p)), v1)
	if err := d.CloneAgain(ctx, other, v); !errors.Is(err, ErrCloneUnsupported) {
		t.Fatalf("a copy into a file not empty: %v, want ErrCloneUnsupported", err)
	}
	e := createIn(t, st, "e", p)
	if err := e.CloneFrom(ctx, x); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "a new copy", readAll(t, openIn(t, st, "e", p)), v2)
}
