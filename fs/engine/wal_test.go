package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
)

// walParams are smallParams with the WAL on.
func walParams(fm segment.Format) Params {
	p := smallParams(fm)
	p.WAL = true
	p.WALLeaseTTL = time.Minute
	return p
}

// crash drops f as a killed mount would: nothing more reaches the store from
// it (a publish in flight is let finish first: a killed process's request
// either landed or did not), the lease is not released, and it expires.
func crash(t *testing.T, f *File) {
	t.Helper()
	f.pubs.Wait()
	f.w.logMu.Lock()
	log := f.w.log
	f.w.log = nil
	f.w.logMu.Unlock()
	if log != nil {
		log.Abandon()
	}
	f.mu.Lock()
	f.closed = true
	f.s.stop()
	// Its memory is gone with it (a closed file holds no dirty blocks).
	f.dirty, f.dirtyB, f.dirtyUnmapped = nil, 0, 0
	f.mu.Unlock()
	// The lease of a killed writer expires.
	if err := f.st.Delete(context.Background(), f.prefix+wal.Dir+wal.OwnerName); err != nil {
		t.Fatalf("expire the lease: %v", err)
	}
}

// waitPublished waits until no WAL publish of f is in flight.
func waitPublished(f *File) { f.pubs.Wait() }

func TestWALCrashKeepsAcknowledged(t *testing.T) {
	ctx := context.Background()
	for _, fm := range []segment.Format{segment.FormatStream, segment.FormatParted} {
		t.Run(fm.String(), func(t *testing.T) {
			st := mem.New()
			o := Options{Params: walParams(fm), FileID: "a"}
			f, err := Create(ctx, st, "a/", o)
			if err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte("0123456789abcdef"), 4000)
			if _, err := f.WriteAt(ctx, want, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// After the publish: more writes, a truncate and a zero, never
			// flushed.
			if _, err := f.WriteAt(ctx, []byte("hello"), 100); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(ctx, 50_000); err != nil {
				t.Fatal(err)
			}
			if err := f.Zero(ctx, 1000, 3000); err != nil {
				t.Fatal(err)
			}
			mt := time.Unix(1_700_000_000, 0)
			if err := f.SetMtime(ctx, mt); err != nil {
				t.Fatal(err)
			}
			copy(want[100:], "hello")
			want = want[:50_000]
			clear(want[1000:4000])
			crash(t, f)

			g, err := Open(ctx, st, "a/", o)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer g.Close()
			if got := readAll(t, g); !bytes.Equal(got, want) {
				t.Fatalf("after the crash: %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
			}
			if s := g.Stat(); s.Dirty || !s.Mtime.Equal(mt) {
				t.Fatalf("after replay: dirty %v mtime %v, want clean and %v", s.Dirty, s.Mtime, mt)
			}
			// A mount without the WAL reads the replayed checkpoint.
			o2 := o
			o2.Params.WAL = false
			h, err := Open(ctx, st, "a/", o2)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if got := readAll(t, h); !bytes.Equal(got, want) {
				t.Fatalf("read without the WAL differs")
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// A mount without the WAL that opens a file a crashed WAL writer left replays
// its records (and a checkpoint of its own later is not overwritten by them).
func TestWALCrossReadable(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	on := Options{Params: walParams(segment.FormatStream), FileID: "x"}
	off := on
	off.Params.WAL = false

	f, err := Create(ctx, st, "x/", on)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("written with the WAL"), 0); err != nil {
		t.Fatal(err)
	}
	crash(t, f)

	g, err := Open(ctx, st, "x/", off)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, g)); got != "written with the WAL" {
		t.Fatalf("without the WAL after a crash: %q", got)
	}
	if _, err := g.WriteAt(ctx, []byte("WRITTEN"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if seqs, err := wal.List(ctx, st, "x/"); err != nil || len(seqs) != 0 {
		t.Fatalf("records left after the replay's checkpoint: %v %v", seqs, err)
	}

	h, err := Open(ctx, st, "x/", on)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, h)); got != "WRITTEN with the WAL" {
		t.Fatalf("with the WAL, after a writer without it: %q", got)
	}
	if _, err := h.WriteAt(ctx, []byte("!"), 20); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	k, err := Open(ctx, st, "x/", off)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if got := string(readAll(t, k)); got != "WRITTEN with the WAL!" {
		t.Fatalf("without the WAL, after a WAL publish: %q", got)
	}
}

// gateStore holds every Put of a key ending in suffix until released.
type gateStore struct {
	staging.Store
	suffix  string
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasSuffix(key, g.suffix) {
		g.once.Do(func() { close(g.arrived) })
		<-g.release
	}
	return g.Store.Put(ctx, key, data, o)
}

// A partial write landing while a WAL publish uploads keeps the bytes of its
// block that it does not cover: they are read from the pinned part 0.
func TestWALPartialWriteDuringPublish(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	gate := &gateStore{Store: mem, suffix: ".0", arrived: make(chan struct{}), release: make(chan struct{})}
	o := Options{Params: walParams(segment.FormatStream), FileID: "p"}
	f, err := Create(ctx, gate, "p/", o)
	if err != nil {
		t.Fatal(err)
	}
	bs := f.Stat().BlockSize
	want := bytes.Repeat([]byte{7}, 4*bs)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	<-gate.arrived // part 0 is uploading, and will until released
	plan, err := f.Plan(ctx, 0, int64(len(want)))
	if err != nil || plan.Pinned != 4 || len(plan.Gets) != 0 {
		t.Fatalf("plan during the publish: %+v %v, want 4 pinned blocks and no GET", plan, err)
	}
	if _, err := f.WriteAt(ctx, []byte("xy"), int64(bs)+10); err != nil {
		t.Fatal(err)
	}
	copy(want[bs+10:], "xy")
	if got := readAll(t, f); !bytes.Equal(got, want) {
		t.Fatalf("during the publish: mismatch at %d", commonPrefix(got, want))
	}
	close(gate.release)
	waitPublished(f)
	if s := f.Stat(); s.Cno != 1 || !s.Dirty {
		t.Fatalf("after the publish: %+v, want checkpoint 1 and the partial write dirty", s)
	}
	if got := readAll(t, f); !bytes.Equal(got, want) {
		t.Fatalf("after the publish: mismatch at %d", commonPrefix(got, want))
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := Open(ctx, mem, "p/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, want) {
		t.Fatalf("reopened: mismatch at %d", commonPrefix(got, want))
	}
}

// One writer at a time: a second File with the WAL on the same prefix gets a
// clear error on its first change; once the first closes it may write.
func TestWALOneWriter(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "w"}
	a, err := Create(ctx, st, "w/", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(ctx, []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, st, "w/", o)
	if err != nil {
		t.Fatalf("a second opener while a writer is live: %v", err)
	}
	_, err = b.WriteAt(ctx, []byte("b"), 0)
	var busy *wal.BusyError
	if !errors.Is(err, wal.ErrBusy) || !errors.As(err, &busy) {
		t.Fatalf("second writer: %v, want wal.ErrBusy", err)
	}
	if !strings.Contains(err.Error(), "one writer at a time") {
		t.Fatalf("the error does not say why: %v", err)
	}
	b.Close()
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()
	c, err := Open(ctx, st, "w/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteAt(ctx, []byte("c"), 1); err != nil {
		t.Fatalf("after the first writer closed: %v", err)
	}
}

// A writer whose last handle closed holds the lease until its last publish
// lands, in the background; a writer of another mount that changes the file
// meanwhile waits for it (the owner says it is closing) instead of failing
// with EBUSY, and builds on its checkpoint.
func TestWALWriterWaitsForClosingWriter(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	gate := &gateStore{Store: st, suffix: ".0", arrived: make(chan struct{}), release: make(chan struct{})}
	o := Options{Params: walParams(segment.FormatStream), FileID: "w"}
	a, err := Create(ctx, gate, "w/", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(ctx, []byte("aaaa"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	<-gate.arrived // the publish uploads part 0 until released
	b, err := Open(ctx, st, "w/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		a.Close()
	}()
	// The owner object says so once the close began (one request).
	owner := "w/" + wal.Dir + wal.OwnerName
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		body, _, err := st.Get(ctx, owner, staging.Range{})
		if err == nil && bytes.Contains(body, []byte(`"closing":true`)) {
			break
		}
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := b.WriteAt(ctx, []byte("b"), 0)
		wrote <- err
	}()
	time.Sleep(100 * time.Millisecond) // the write waits meanwhile
	close(gate.release)
	if err := <-wrote; err != nil {
		t.Fatalf("a write while the other writer closed: %v", err)
	}
	<-closed
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(b)
	c, err := Open(ctx, st, "w/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := readAll(t, c); string(got) != "baaa" {
		t.Fatalf("the file reads %q, want %q", got, "baaa")
	}
}

// A File kept open for reading lets the lease go once its last writer is
// done and everything is published (LetGoWAL): another mount writes at once,
// and a change here afterwards takes the lease again, building on that
// mount's checkpoint.
func TestWALLetGoWhileOpen(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "g"}
	a, err := Create(ctx, st, "g/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	writeFlush(t, a, []byte("aaaa"), 0)
	a.LetGoWAL(ctx)
	if held, err := wal.Held(ctx, st, "g/"); err != nil || held {
		t.Fatalf("lease held after LetGoWAL: %v %v", held, err)
	}
	if m := a.mark.Load(); m.leased {
		t.Fatal("after LetGoWAL, Refresh still takes the file for the lease's holder (it would list no other writer's records)")
	}
	b, err := Open(ctx, st, "g/", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(ctx, []byte("b"), 1); err != nil {
		t.Fatalf("another writer after the first let go: %v", err)
	}
	// The first shows the other's logged write at its next refresh (an
	// open there), as any reader of a live writer does.
	if _, err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, a); string(got) != "abaa" {
		t.Fatalf("after the other's write, unpublished, the first reads %q, want %q", got, "abaa")
	}
	if _, err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := a.WriteAt(ctx, []byte("c"), 2); err != nil {
		t.Fatalf("the first writer again: %v", err)
	}
	if got := readAll(t, a); string(got) != "abca" {
		t.Fatalf("the first writer reads %q, want %q", got, "abca")
	}
	// Changes left to publish keep the lease, and the owner does not say
	// it is closing.
	a.LetGoWAL(ctx)
	if held, err := wal.Held(ctx, st, "g/"); err != nil || !held {
		t.Fatalf("lease let go with a change unpublished: %v %v", held, err)
	}
	if owner := walOwnerBody(t, st, "g/"); strings.Contains(owner, "closing") {
		t.Fatalf("owner %s, want one not closing", owner)
	}
}

// walOwnerBody is the owner object (the lease) of the file at prefix.
func walOwnerBody(t *testing.T, st staging.Store, prefix string) string {
	t.Helper()
	body, _, err := st.Get(context.Background(), prefix+wal.Dir+wal.OwnerName, staging.Range{})
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// A change that comes while LetGoWAL waits for the last publish keeps the
// lease, and the owner object stops saying it is closing: a writer of
// another mount must not wait for a close that is not coming.
func TestWALLetGoTakesTheMarkBack(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	gate := &gateStore{Store: st, suffix: volume.HeadName, arrived: make(chan struct{}), release: make(chan struct{})}
	o := Options{Params: walParams(segment.FormatStream), FileID: "g"}
	c, err := Create(ctx, st, "g/", o)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	a, err := Open(ctx, gate, "g/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	writeFlush(t, a, []byte("aaaa"), 0)
	<-gate.arrived // the publish's head waits
	letGo := make(chan struct{})
	go func() {
		defer close(letGo)
		a.LetGoWAL(ctx)
	}()
	owner := func() string { return walOwnerBody(t, st, "g/") }
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: owner %s", what, owner())
			}
		}
	}
	waitFor("marked closing", func() bool { return strings.Contains(owner(), `"closing"`) })
	if _, err := a.WriteAt(ctx, []byte("b"), 1); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	<-letGo
	if held, err := wal.Held(ctx, st, "g/"); err != nil || !held {
		t.Fatalf("lease let go with a change unpublished: %v %v", held, err)
	}
	waitFor("the mark taken back", func() bool { return !strings.Contains(owner(), `"closing"`) })
}

func TestWALCreateRefusesLeftovers(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	if _, err := st.Put(ctx, "l/"+wal.Dir+"00000000000000000007", []byte("x"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := Create(ctx, st, "l/", Options{Params: walParams(segment.FormatStream), FileID: "l"})
	if !errors.Is(err, ErrWALNotEmpty) || !strings.Contains(err.Error(), "l/wal/") {
		t.Fatalf("create over a WAL: %v, want ErrWALNotEmpty naming the prefix", err)
	}
}

// A replay interrupted before its checkpoint lands replays again the same way;
// a corrupt record is refused by name and nothing is deleted; a torn record
// among the last ones (an upload a crash cut short) is skipped.
func TestWALReplayInterruptedTornAndCorrupt(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	o := Options{Params: walParams(segment.FormatParted), FileID: "r"}
	f, err := Create(ctx, faults, "r/", o)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 20 {
		p := bytes.Repeat([]byte{byte(i + 1)}, 700)
		if _, err := f.WriteAt(ctx, p, int64(i*500)); err != nil {
			t.Fatal(err)
		}
		if end := i*500 + 700; end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[i*500:], p)
	}
	crash(t, f)
	faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "/inode", Times: 1, Kind: faulty.Error})
	if _, err := Open(ctx, faults, "r/", o); err == nil {
		t.Fatalf("open with the replay's head failing: no error")
	}
	mem.Delete(ctx, "r/"+wal.Dir+wal.OwnerName) // that opener died too
	g, err := Open(ctx, faults, "r/", o)
	if err != nil {
		t.Fatalf("second replay: %v", err)
	}
	if got := readAll(t, g); !bytes.Equal(got, want) {
		t.Fatalf("after an interrupted replay: mismatch at %d", commonPrefix(got, want))
	}
	// Eight more records, one write each; then the crash.
	for i := range 8 {
		if _, err := g.WriteAt(ctx, []byte{'a' + byte(i)}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	crash(t, g)
	seqs, err := wal.List(ctx, mem, "r/")
	if err != nil || len(seqs) < 8 {
		t.Fatalf("records: %v %v", seqs, err)
	}
	get := func(key string) []byte {
		body, _, err := mem.Get(ctx, key, staging.Range{})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	put := func(key string, body []byte) {
		if _, err := mem.Put(ctx, key, body, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The last record torn, as a store that keeps what it received of an
	// upload cut short by the crash leaves it; its write was never
	// acknowledged.
	torn := wal.RecordKey("r/", seqs[len(seqs)-1])
	put(torn, get(torn)[:40])
	// A record before the ones that may have been in flight, damaged.
	key := wal.RecordKey("r/", seqs[len(seqs)-8])
	good := get(key)
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x40
	put(key, bad)
	_, err = Open(ctx, mem, "r/", o)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("open over a corrupt record: %v, want wal.ErrCorrupt naming %s", err, key)
	}
	if _, _, err := mem.Get(ctx, key, staging.Range{}); err != nil {
		t.Fatalf("the corrupt record is gone: %v", err)
	}
	mem.Delete(ctx, "r/"+wal.Dir+wal.OwnerName) // that opener failed too
	put(key, good)
	h, err := Open(ctx, mem, "r/", o)
	if err != nil {
		t.Fatalf("open over a torn last record: %v", err)
	}
	copy(want, "abcdefg") // the eighth write ('h') was torn
	if got := readAll(t, h); !bytes.Equal(got, want) {
		t.Fatalf("after skipping the torn record: mismatch at %d", commonPrefix(got, want))
	}
	h.Close()
	if left, err := wal.List(ctx, mem, "r/"); err != nil || len(left) != 0 {
		t.Fatalf("records left after the replay: %v %v", left, err)
	}
}

// latencyStore delays every request, so that concurrent writes meet in one
// record.
type latencyStore struct {
	staging.Store
	d    time.Duration
	puts atomic.Int64
}

func (l *latencyStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	time.Sleep(l.d)
	if strings.Contains(key, "/"+wal.Dir) {
		l.puts.Add(1)
	}
	return l.Store.Put(ctx, key, data, o)
}

func TestWALGroupCommit(t *testing.T) {
	ctx := context.Background()
	st := &latencyStore{Store: mem.New(), d: 5 * time.Millisecond}
	o := Options{Params: walParams(segment.FormatStream), FileID: "g"}
	o.Params.DataBlockSize = 4096
	o.Params.DirtyLimit = 64 << 20 // no partial segments: they hold the file
	f, err := Create(ctx, st, "g/", o)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 64, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := bytes.Repeat([]byte{byte(w)}, 4096)
				if _, err := f.WriteAt(ctx, p, int64((i*writers+w)*4096)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	puts := st.puts.Load() - 1 // the lease
	if puts >= writers*each/4 {
		t.Fatalf("%d acknowledged writes took %d record PUTs: no group commit", writers*each, puts)
	}
	t.Logf("%d writes, %d record PUTs", writers*each, puts)
	crash(t, f)
	g, err := Open(ctx, st, "g/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := readAll(t, g)
	for i := range writers * each {
		if got[i*4096] != byte(i%writers) {
			t.Fatalf("block %d: %d, want %d", i, got[i*4096], i%writers)
		}
	}
}

// A checkpoint larger than one object is refused on the WAL path and goes
// the direct way, in parts.
func TestWALLargeCheckpointDirect(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "big"}
	o.Params.DirtyLimit = 1 << 20
	f, err := Create(ctx, st, "big/", o)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 200<<10) // > MaxObjectBytes (48K)
	for i := range want {
		want[i] = byte(i / 512)
	}
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	ft, err := f.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ft.Objects < 2 || f.Stat().Cno != ft.Cno {
		t.Fatalf("flush: %+v (head %d), want several objects, published on return", ft, f.Stat().Cno)
	}
	f.Close()
	g, err := Open(ctx, st, "big/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, want) {
		t.Fatalf("mismatch at %d", commonPrefix(got, want))
	}
}

// A publish whose part 0 cannot be stored leaves the file to be recovered by
// the next Flush: nothing acknowledged is lost.
func TestWALPublishFailsThenRecovers(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 3)
	o := Options{Params: walParams(segment.FormatStream), FileID: "f"}
	f, err := Create(ctx, faults, "f/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ctx, []byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: ".0", Times: publishAttempts, Kind: faulty.Error})
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(f)
	if s := f.Stat(); s.Cno != 0 || !s.Dirty {
		t.Fatalf("after a failed publish: %+v, want no checkpoint and dirty", s)
	}
	if _, err := f.WriteAt(ctx, []byte("FI"), 0); err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, f)); got != "FIrst" {
		t.Fatalf("read after a failed publish: %q", got)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatalf("recovering flush: %v", err)
	}
	waitPublished(f)
	if got := string(readAll(t, f)); got != "FIrst" || f.Stat().Cno == 0 || f.Stat().Dirty {
		t.Fatalf("after recovery: %q %+v", got, f.Stat())
	}
}

// The randomized model with the WAL on, crashes at random points included:
// a crash keeps everything acknowledged.
func TestModelWAL(t *testing.T) {
	ops := modelOps(20_000, 3_000)
	for _, c := range []struct {
		name  string
		fm    segment.Format
		flaky bool
	}{
		{"stream", segment.FormatStream, false},
		{"parted", segment.FormatParted, false},
		{"stream-publish-faults", segment.FormatStream, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var st staging.Store = mem.New()
			var faults *faulty.Store
			if c.flaky {
				faults = faulty.New(st, int64(modelSeed(t)))
				// Checkpoint objects fail, WAL records never: a write is
				// acknowledged or refused, and publishes fail and recover.
				isObject := func(k string) bool { return !strings.Contains(k, "/"+wal.Dir) }
				faults.Add(faulty.Rule{Op: staging.OpPut, Match: isObject, Fraction: 0.05, Kind: faulty.Error})
				st = faults
			}
			runModelFlaky(t, st, walParams(c.fm), ops, 200_000, 40_000, c.flaky)
			if faults != nil && faults.Injected() == 0 {
				t.Fatalf("no fault fired")
			}
		})
	}
}

// Flush returns at once while a publish is in flight (what came since is in
// the log); Sync waits for it, publishes the rest and waits for that too.
func TestWALFlushDuringPublishAndSync(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	gate := &gateStore{Store: mem, suffix: ".0", arrived: make(chan struct{}), release: make(chan struct{})}
	o := Options{Params: walParams(segment.FormatStream), FileID: "s"}
	f, err := Create(ctx, gate, "s/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ctx, []byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	<-gate.arrived
	if _, err := f.WriteAt(ctx, []byte("two"), 3); err != nil {
		t.Fatal(err)
	}
	ft, err := f.Flush(ctx)
	if err != nil || ft.Cno != 0 || !f.Stat().Dirty {
		t.Fatalf("flush during a publish: %+v %v (dirty %v), want an immediate return, still dirty", ft, err, f.Stat().Dirty)
	}
	done := make(chan error, 1)
	go func() { done <- f.Sync(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Sync returned before the publish in flight landed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := f.Stat(); s.Dirty || s.Cno != 2 {
		t.Fatalf("after Sync: %+v, want checkpoint 2, clean", s)
	}
	g, err := Open(ctx, mem, "s/", Options{Params: smallParams(segment.FormatStream), FileID: "s", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := string(readAll(t, g)); got != "onetwo" {
		t.Fatalf("published: %q", got)
	}
}

// Nothing is sent ahead with the WAL, whatever stream_segment_bytes says.
func TestWALSendsNothingAhead(t *testing.T) {
	ctx := context.Background()
	for _, wal := range []bool{false, true} {
		st := mem.New()
		p := sendWholeParams()
		p.WAL = wal
		f, err := Create(ctx, st, "n/", Options{Params: p, FileID: "n"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{9}, 64<<10), 0); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		_ = f.s.takeInLocked(ctx, true) // objects in flight land
		f.mu.Unlock()
		objs, err := staging.ListAll(ctx, st, "n/")
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		for _, o := range objs {
			if _, _, err := segment.ParseObjectName(strings.TrimPrefix(o.Key, "n/")); err == nil {
				sent++
			}
		}
		if wal != (sent == 0) {
			t.Fatalf("wal=%v: %d objects sent before any flush", wal, sent)
		}
		f.Close()
	}
}

// A publish of a long run and scattered blocks together is still one object:
// isolation does not split it off the WAL path.
func TestWALPublishMixedIsOneObject(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "m"}
	o.Params.MaxObjectBytes = 1 << 20
	o.Params.DirtyLimit = 1 << 20
	f, err := Create(ctx, st, "m/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := int64(0); off < 256<<10; off += 8 << 10 { // a sequential run
		if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{1}, 8<<10), off); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 { // scattered small writes
		if _, err := f.WriteAt(ctx, []byte{2}, int64(300<<10+i*7919)); err != nil {
			t.Fatal(err)
		}
	}
	ft, err := f.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(f)
	if ft.Objects != 1 || f.Stat().Cno != ft.Cno {
		t.Fatalf("publish: %+v, want one object (published %d)", ft, f.Stat().Cno)
	}
}

// A writer whose lease another took fails its writes with wal.ErrLeaseLost;
// what it had acknowledged is in the log for the next writer.
func TestWALLeaseLost(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "ll"}
	o.Params.WALLeaseTTL = 60 * time.Millisecond
	f, err := Create(ctx, st, "ll/", o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	// Another writer takes the lease (as if this one had paused past it).
	other := `{"writer":"other","host":"elsewhere","pid":1,"boot":"b","expires":"` +
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) + `"}`
	if _, err := st.Put(ctx, "ll/"+wal.Dir+wal.OwnerName, []byte(other), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := f.WriteAt(ctx, []byte("x"), 10)
		if errors.Is(err, wal.ErrLeaseLost) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("write after the lease was taken: %v, want wal.ErrLeaseLost", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	crash(t, f)
	g, err := Open(ctx, st, "ll/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := string(readAll(t, g)[:4]); got != "kept" {
		t.Fatalf("after the lease was lost: %q", got)
	}
}

// storeKeys lists every key under prefix.
func storeKeys(t *testing.T, st staging.Store, prefix string) []string {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

// TestWALReaderOverlaysLiveWriter: a file opened while another writer holds
// its WAL shows every record that writer stored (writes, a truncate, a zero),
// without publishing them or writing anything; an open later shows what came
// since. Once the writer is gone, the reader's first write takes the lease,
// keeps what it showed, applies what the writer logged after, and publishes
// all of it with its own write.
func TestWALReaderOverlaysLiveWriter(t *testing.T) {
	ctx := context.Background()
	for _, withWAL := range []bool{true, false} {
		t.Run(map[bool]string{true: "reader with the WAL", false: "reader without the WAL"}[withWAL], func(t *testing.T) {
			st := mem.New()
			o := Options{Params: walParams(segment.FormatStream), FileID: "ov"}
			a, err := Create(ctx, st, "ov/", o)
			if err != nil {
				t.Fatal(err)
			}
			base := bytes.Repeat([]byte("published "), 3000)
			if _, err := a.WriteAt(ctx, base, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			waitPublished(a)
			// Logged, not published.
			if _, err := a.WriteAt(ctx, bytes.Repeat([]byte("logged "), 5000), 10_000); err != nil {
				t.Fatal(err)
			}
			if err := a.Truncate(ctx, 40_000); err != nil {
				t.Fatal(err)
			}
			if err := a.Zero(ctx, 20_000, 5000); err != nil {
				t.Fatal(err)
			}
			mt := time.Unix(1_600_000_000, 42)
			if err := a.SetMtime(ctx, mt); err != nil {
				t.Fatal(err)
			}
			want := readAll(t, a)
			_, headInfo, err := a.readHead(ctx)
			if err != nil {
				t.Fatal(err)
			}
			before := storeKeys(t, st, "ov/")

			ro := o
			ro.Params.WAL = withWAL
			b, err := Open(ctx, st, "ov/", ro)
			if err != nil {
				t.Fatalf("open while a writer holds the WAL: %v", err)
			}
			defer b.Close()
			if got := readAll(t, b); !bytes.Equal(got, want) {
				t.Fatalf("reader: %d bytes, common prefix %d; want the writer's %d", len(got), commonPrefix(got, want), len(want))
			}
			if s := b.Stat(); s.Size != int64(len(want)) || !s.Mtime.Equal(mt) || s.Dirty {
				t.Fatalf("reader's stat %+v, want size %d, mtime %v, not dirty", s, len(want), mt)
			}
			v, err := ViewWAL(ctx, st, "ov/", ro)
			if err != nil || v.Size != int64(len(want)) || !v.Mtime.Equal(mt) || v.Last != b.w.seq || v.Last == 0 {
				t.Fatalf("ViewWAL: %+v, %v; want size %d, mtime %v, last %d", v, err, len(want), mt, b.w.seq)
			}
			if _, err := b.Flush(ctx); err != nil {
				t.Fatalf("flush of a reader: %v", err)
			}
			_, info, err := b.readHead(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.ETag != headInfo.ETag {
				t.Fatal("the reader published a checkpoint")
			}
			if after := storeKeys(t, st, "ov/"); !slices.Equal(after, before) {
				t.Fatalf("the reader changed the store: %v, was %v", after, before)
			}

			// More from the writer: a new open sees it, the one open still
			// shows what it read.
			if _, err := a.WriteAt(ctx, []byte("MORE"), 40_000); err != nil {
				t.Fatal(err)
			}
			want2 := readAll(t, a)
			if got := readAll(t, b); !bytes.Equal(got, want) {
				t.Fatalf("the open reader changed under it: %d bytes", len(got))
			}
			c, err := Open(ctx, st, "ov/", ro)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, c); !bytes.Equal(got, want2) {
				t.Fatalf("a later open: %d bytes, common prefix %d; want %d", len(got), commonPrefix(got, want2), len(want2))
			}
			c.Close()
			if !withWAL {
				return
			}

			// The writer dies after one more write; the reader writes.
			if _, err := a.WriteAt(ctx, []byte("LAST"), 40_004); err != nil {
				t.Fatal(err)
			}
			want3 := append(readAll(t, a), []byte("BBB")...)
			crash(t, a)
			if _, err := b.WriteAt(ctx, []byte("BBB"), 40_008); err != nil {
				t.Fatalf("the reader's write once the writer is gone: %v", err)
			}
			if got := readAll(t, b); !bytes.Equal(got, want3) {
				t.Fatalf("after the reader's write: %d bytes, common prefix %d; want %d", len(got), commonPrefix(got, want3), len(want3))
			}
			if err := b.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			b.Close()
			ro.Params.WAL = false
			d, err := Open(ctx, st, "ov/", ro)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if got := readAll(t, d); !bytes.Equal(got, want3) {
				t.Fatalf("published: %d bytes, common prefix %d; want %d", len(got), commonPrefix(got, want3), len(want3))
			}
			if seqs, err := walList(st, "ov/"); err != nil || len(seqs) != 0 {
				t.Fatalf("records left after the publish: %v %v", seqs, err)
			}
		})
	}
}

func walList(st staging.Store, prefix string) ([]uint64, error) {
	return wal.List(context.Background(), st, prefix)
}

// TestWALOverlayTooLarge: a reader whose memory limit cannot hold a live
// writer's records refuses to open the file rather than show it without
// them.
func TestWALOverlayTooLarge(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "big"}
	a, err := Create(ctx, st, "big/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.WriteAt(ctx, make([]byte, 256<<10), 0); err != nil {
		t.Fatal(err)
	}
	ro := o
	ro.Budget = NewBudget(64 << 10)
	_, err = Open(ctx, st, "big/", ro)
	if !errors.Is(err, ErrOverlayTooLarge) {
		t.Fatalf("open with a memory limit below the writer's records: %v, want ErrOverlayTooLarge", err)
	}
	if used := ro.Budget.Used(); used != 0 {
		t.Fatalf("%d bytes of the budget held after the refused open", used)
	}
}

// TestWALLeaseTakenBackAfterReplay: a store outage stops a writer's lease
// renewals; another opener takes the expired lease, replays and publishes
// the writer's records and lets the lease go. No one else wrote, so the
// writer takes the lease back and its writes go on; its next publish
// conflicts with the replay's checkpoint and recovers, keeping everything.
func TestWALLeaseTakenBackAfterReplay(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 5)
	o := Options{Params: walParams(segment.FormatStream), FileID: "tb"}
	o.Params.WALLeaseTTL = 60 * time.Millisecond
	a, err := Create(ctx, faults, "tb/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.WriteAt(ctx, []byte("first "), 0); err != nil {
		t.Fatal(err)
	}
	owner := "tb/" + wal.Dir + wal.OwnerName
	outage := faults.Add(faulty.Rule{Op: staging.OpAny, KeyPrefix: owner, Kind: faulty.Error})
	expired := func() bool {
		b, _, err := mem.Get(ctx, owner, staging.Whole())
		var o struct{ Expires time.Time }
		return err == nil && json.Unmarshal(b, &o) == nil && time.Now().After(o.Expires)
	}
	for deadline := time.Now().Add(10 * time.Second); !expired(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease did not expire during the outage")
		}
	}
	b, err := Open(ctx, mem, "tb/", o)
	if err != nil {
		t.Fatalf("open with the writer's lease expired: %v", err)
	}
	if got := string(readAll(t, b)); got != "first " || b.Stat().Cno == 0 {
		t.Fatalf("the opener: %q, %+v; want the writer's records replayed and published", got, b.Stat())
	}
	b.Close()
	faults.Remove(outage)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, _, err := mem.Get(ctx, owner, staging.Whole()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not take its lease back")
		}
	}
	if _, err := a.WriteAt(ctx, []byte("second"), 6); err != nil {
		t.Fatalf("a write of the first writer once the store is back: %v", err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	c, err := Open(ctx, mem, "tb/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := string(readAll(t, c)); got != "first second" {
		t.Fatalf("published: %q", got)
	}
}

// getHookStore runs hook once, before the first Get of a key containing
// match.
type getHookStore struct {
	staging.Store
	match string
	once  sync.Once
	hook  func()
}

func (s *getHookStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if strings.Contains(key, s.match) {
		s.once.Do(s.hook)
	}
	return s.Store.Get(ctx, key, r)
}

// TestWALOverlayWriterPublishesMeanwhile: the live writer publishes, and
// deletes its records, while a reader reads them; the reader reads the head
// again and shows the writer's checkpoint, and so does ViewWAL.
func TestWALOverlayWriterPublishesMeanwhile(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "pm"}
	a, err := Create(ctx, mem, "pm/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 4 {
		if _, err := a.WriteAt(ctx, bytes.Repeat([]byte{'a' + byte(i)}, 3000), int64(i)*3000); err != nil {
			t.Fatal(err)
		}
	}
	want := readAll(t, a)
	for _, view := range []bool{false, true} {
		published := false
		st := &getHookStore{Store: mem, match: "/" + wal.Dir + "0", hook: func() {
			published = publishAndWait(t, a, mem, "pm/")
		}}
		if view {
			v, err := ViewWAL(ctx, st, "pm/", o)
			if err != nil || v.Size != int64(len(want)) || v.Inode.Cno == 0 {
				t.Fatalf("ViewWAL while the writer publishes: %+v, %v", v, err)
			}
		} else {
			b, err := Open(ctx, st, "pm/", o)
			if err != nil {
				t.Fatalf("open while the writer publishes: %v", err)
			}
			if got := readAll(t, b); !bytes.Equal(got, want) || b.Stat().Cno == 0 {
				t.Fatalf("reader: %d bytes, %+v; want the writer's %d, published", len(got), b.Stat(), len(want))
			}
			b.Close()
		}
		if !published {
			t.Fatal("the writer did not publish during the read")
		}
		// More for the second round.
		if _, err := a.WriteAt(ctx, []byte("more"), int64(len(want))); err != nil {
			t.Fatal(err)
		}
		want = readAll(t, a)
	}
}

// TestWALOpenAfterWriterLetGo: a reader opens while the writer publishes
// and lets its lease go (the close of its last handle): the reader read the
// head before the publish and listed the records before the writer deleted
// them, then takes the lease the writer let go. It must show the writer's
// checkpoint (the head read again once the lease is its own), not the old
// head without the records, which are gone, nor fail on a record gone.
func TestWALOpenAfterWriterLetGo(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "lg"}
	a, err := Create(ctx, mem, "lg/", o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := a.WriteAt(ctx, bytes.Repeat([]byte{'a' + byte(i)}, 3000), int64(i)*3000); err != nil {
			t.Fatal(err)
		}
	}
	want := readAll(t, a)
	closed := false
	st := &getHookStore{Store: mem, match: "/" + wal.Dir + wal.OwnerName, hook: func() {
		if err := a.Sync(ctx); err != nil {
			t.Errorf("writer's fsync: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("writer's close: %v", err)
		}
		closed = true
	}}
	b, err := Open(ctx, st, "lg/", o)
	if err != nil {
		t.Fatalf("open while the writer lets its lease go: %v", err)
	}
	defer b.Close()
	if !closed {
		t.Fatal("the writer did not close while the reader took the lease")
	}
	if got := readAll(t, b); !bytes.Equal(got, want) || b.Stat().Cno == 0 {
		t.Fatalf("reader: %d bytes, %+v; want the writer's %d, published", len(got), b.Stat(), len(want))
	}
	if seqs, err := wal.List(ctx, mem, "lg/"); err != nil || len(seqs) != 0 {
		t.Fatalf("records left: %v, %v", seqs, err)
	}
}

// TestWALOpenBetweenPublishAndNextWrite: a reader reads the head, and before
// it lists the log the live writer publishes (deleting the records its
// checkpoint holds) and writes again. The listing then starts past the
// head's next record: applied over the head the reader read, the later
// record alone would show its bytes without the earlier writes (a hole
// where the first write was). The reader must read the head again, and so
// must a Refresh that meets the same gap.
func TestWALOpenBetweenPublishAndNextWrite(t *testing.T) {
	ctx := context.Background()
	for _, refresh := range []bool{false, true} {
		mem := mem.New()
		o := Options{Params: walParams(segment.FormatStream), FileID: "gp"}
		a, err := Create(ctx, mem, "gp/", o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.WriteAt(ctx, []byte("one"), 0); err != nil {
			t.Fatal(err)
		}
		hs := &listHookStore{Store: mem, hook: func() {}}
		var b *File
		if refresh {
			// The reader opens first: the head without "one", and its
			// record; it refreshes later.
			if b, err = Open(ctx, hs, "gp/", o); err != nil {
				t.Fatal(err)
			}
			hs.once = sync.Once{}
		}
		hs.hook = func() {
			publishAndWait(t, a, mem, "gp/")
			if _, err := a.WriteAt(ctx, []byte("two"), 3); err != nil {
				t.Errorf("writer: %v", err)
			}
		}
		if refresh {
			if _, err := a.WriteAt(ctx, []byte("six"), 6); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Refresh(ctx); err != nil {
				t.Fatalf("refresh: %v", err)
			}
		} else if b, err = Open(ctx, hs, "gp/", o); err != nil {
			t.Fatalf("open: %v", err)
		}
		want := readAll(t, a)
		if got := readAll(t, b); !bytes.Equal(got, want) {
			t.Fatalf("refresh %v: the reader shows %q, the writer %q", refresh, got, want)
		}
		b.Close()
		a.Close()
	}
}

// TestWALAppendAfterOtherWriter: with the WAL an append lands at the end the
// file has once the lease is this writer's, not at the size it last knew:
// another writer appended and let the lease go meanwhile. Its record holds
// the offset it took, so a replay after a crash puts the bytes there too.
func TestWALAppendAfterOtherWriter(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	o := Options{Params: walParams(segment.FormatStream), FileID: "ap"}
	a, err := Create(ctx, st, "ap/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	writeFlush(t, a, []byte("base\n"), 0)
	a.LetGoWAL(ctx)
	b, err := Open(ctx, st, "ap/", o)
	if err != nil {
		t.Fatal(err)
	}
	if at, _, err := a.Append(ctx, []byte("from-a\n")); err != nil || at != 5 {
		t.Fatalf("append on a: at %d, %v", at, err)
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.LetGoWAL(ctx)
	at, _, err := b.Append(ctx, []byte("from-b\n"))
	if err != nil {
		t.Fatal(err)
	}
	const want = "base\nfrom-a\nfrom-b\n"
	if at != 12 {
		t.Errorf("b appended at %d, want 12 (the end a left)", at)
	}
	if got := readAll(t, b); string(got) != want {
		t.Fatalf("b reads %q, want %q", got, want)
	}
	crash(t, b)
	c, err := Open(ctx, st, "ap/", o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := readAll(t, c); string(got) != want {
		t.Fatalf("after b's crash, its record replayed: %q, want %q", got, want)
	}
}
