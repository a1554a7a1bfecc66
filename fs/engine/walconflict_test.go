package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
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

// armedGateStore holds the first Put of a key that match accepts, made
// once armed, until release is closed; arrived is closed when it comes.
type armedGateStore struct {
	staging.Store
	match   func(key string) bool
	armed   atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func newArmedGate(st staging.Store, match func(key string) bool) *armedGateStore {
	return &armedGateStore{Store: st, match: match, arrived: make(chan struct{}), release: make(chan struct{})}
}

func (g *armedGateStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if g.match(key) && g.armed.CompareAndSwap(true, false) {
		close(g.arrived)
		<-g.release
	}
	return g.Store.Put(ctx, key, data, o)
}

func isHeadKey(key string) bool { return strings.HasSuffix(key, "/"+volume.HeadName) }

// headWAL reads what the stored head says of the WAL.
func headWAL(t *testing.T, st staging.Store, prefix string) (applied uint64, tracked bool) {
	t.Helper()
	info, err := st.Head(context.Background(), volume.HeadKey(prefix))
	if err != nil {
		t.Fatalf("read the head of %s: %v", prefix, err)
	}
	applied, tracked, err = wal.HeadApplied(info.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return applied, tracked
}

// A mount without the WAL holds a write of A×100,000 over X×200,000; a
// WAL mount truncates the file to 0 and publishes it (fsync), and closes
// it. The truncate is acknowledged, and its fsync returned, before the
// plain mount's flush begins: the file ends as the truncate, then the
// write (A×100,000), whichever publish lands first. When the plain mount's
// flush lands first, it publishes the WAL writer's records under its own
// changes (a checkpoint holding them, then its merge onto it) and keeps the
// mark; the WAL writer's publish loses its If-Match and its close finds
// nothing left to replay. When the WAL publish lands first, the plain
// mount's flush merges onto it. A plain flush that landed before the
// truncate was made gives the write, then the truncate (empty). Never a
// mix of both. Before bfc1591 the plain mount's head dropped the WAL's
// mark, the close left the truncate's record behind for good, and the file
// read as A×100,000 then X×100,000 everywhere; before the records went
// under the plain flush, the plain flush landing first gave an empty file:
// the truncate, acknowledged before that flush began, replayed over the
// write the flush acknowledged.
func TestWALPublishLostToPlainFlushIsMerged(t *testing.T) {
	for _, tc := range []struct {
		name        string
		walFirst    bool
		plainBefore bool // the plain flush lands before the truncate
		want        int  // As at the end
	}{
		{"plain flush lands first", false, false, 100_000},
		{"WAL publish lands first", true, false, 100_000},
		{"plain flush lands before the truncate", false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := mem.New()
			const prefix = "tw/"
			plain := smallParams(segment.FormatStream)
			c := mustCreate(t, st, prefix, plain)
			if _, err := c.WriteAt(ctx, bytes.Repeat([]byte{'X'}, 200_000), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			c.Close()

			p := mustOpen(t, st, prefix, plain)
			defer p.Close()
			as := bytes.Repeat([]byte{'A'}, 100_000)
			if _, err := p.WriteAt(ctx, as, 0); err != nil {
				t.Fatal(err)
			}

			gate := newArmedGate(st, isHeadKey)
			w, err := Open(ctx, gate, prefix, Options{Params: walParams(segment.FormatStream), FileID: prefix})
			if err != nil {
				t.Fatal(err)
			}
			if tc.plainBefore {
				if _, err := p.Flush(ctx); err != nil {
					t.Fatalf("plain mount's flush: %v", err)
				}
			}
			if err := w.Truncate(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if tc.walFirst || tc.plainBefore {
				close(gate.release)
			}
			gate.armed.Store(true)
			if _, err := w.Flush(ctx); err != nil { // the fsync: acknowledged
				t.Fatal(err)
			}
			<-gate.arrived // the publish's head is held back, or not
			if tc.walFirst {
				waitPublished(w)
			}

			if _, err := p.Flush(ctx); err != nil {
				t.Fatalf("plain mount's flush: %v", err)
			}
			if _, tracked := headWAL(t, st, prefix); !tracked {
				t.Errorf("the plain mount's flush over a head written with the WAL published a head without %s: records after it are found by no opener", wal.HeadMeta)
			}
			if !tc.walFirst && !tc.plainBefore {
				close(gate.release)
			}
			waitPublished(w)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if applied, _ := headWAL(t, st, prefix); applied < 1 {
				t.Errorf("after the WAL writer's close the head holds WAL records up to %d: its acknowledged truncate (record 1) is not published", applied)
			}
			if seqs, err := wal.List(ctx, st, prefix); err != nil || len(seqs) != 0 {
				t.Errorf("records left after the WAL writer's close: %v %v", seqs, err)
			}

			r, err := Open(ctx, st, prefix, Options{Params: walParams(segment.FormatStream), FileID: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := readAll(t, r); !bytes.Equal(got, as[:tc.want]) {
				t.Fatalf("file of %d bytes (%d of them A, from the start); want %d A", len(got), commonPrefix(got, as), tc.want)
			}
		})
	}
}

// The crash-and-fault campaign's walmix, on a file written with the WAL
// from its creation: a mount without the WAL writes 8,788 bytes at 32,566
// of a 35,896-byte file without flushing; the WAL writer truncates it to
// 32,639 and fsyncs (acknowledged, its publish held back); the plain
// mount's fsync follows, then the WAL writer's close. The file holds the
// truncate, then the plain write (41,354 bytes). Before, the plain flush
// published over the head the WAL writer's records were after, and the
// WAL writer's close replayed the truncate over it: 32,639 bytes, the
// write's acknowledged bytes past them gone.
func TestWALRecordsGoUnderPlainFlush(t *testing.T) {
	for _, tc := range []struct {
		name         string
		size, off, n int
		trunc        int
		overlay      bool // the base is a record the plain mount shows
	}{
		{"write across the truncate", 35_896, 32_566, 8_788, 32_639, false},
		{"write past a gap", 43_620, 43_603, 13_125, 15_929, false},
		{"write past a gap over records shown", 43_620, 43_603, 13_125, 15_929, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testWALRecordsGoUnderPlainFlush(t, tc.size, tc.off, tc.n, tc.trunc, tc.overlay) })
	}
}

func testWALRecordsGoUnderPlainFlush(t *testing.T, size, off, n, trunc int, overlay bool) {
	ctx := context.Background()
	st := mem.New()
	const prefix = "wm/"
	wo := Options{Params: walParams(segment.FormatStream), FileID: prefix}
	c, err := Create(ctx, st, prefix, wo)
	if err != nil {
		t.Fatal(err)
	}
	base := pattern(size, 1)
	if !overlay {
		if _, err := c.WriteAt(ctx, base, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		waitPublished(c)
	}
	c.Close()

	gate := newArmedGate(st, isHeadKey)
	w, err := Open(ctx, gate, prefix, wo)
	if err != nil {
		t.Fatal(err)
	}
	if overlay {
		// Acknowledged, not published: the plain mount's open shows it.
		if _, err := w.WriteAt(ctx, base, 0); err != nil {
			t.Fatal(err)
		}
	}
	p := mustOpen(t, st, prefix, smallParams(segment.FormatStream))
	defer p.Close()
	mine := pattern(n, 2)
	if _, err := p.WriteAt(ctx, mine, int64(off)); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(ctx, int64(trunc)); err != nil {
		t.Fatal(err)
	}
	gate.armed.Store(true)
	if _, err := w.Flush(ctx); err != nil { // the fsync: acknowledged
		t.Fatal(err)
	}
	<-gate.arrived // the WAL publish's head waits
	if _, err := p.Flush(ctx); err != nil {
		t.Fatalf("plain mount's flush: %v", err)
	}
	close(gate.release)
	waitPublished(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if seqs, err := wal.List(ctx, st, prefix); err != nil || len(seqs) != 0 {
		t.Errorf("records left after the WAL writer's close: %v %v", seqs, err)
	}

	want := append(append(append([]byte{}, base[:min(trunc, off)]...), make([]byte, max(0, off-trunc))...), mine...)
	r := mustOpen(t, st, prefix, smallParams(segment.FormatStream))
	defer r.Close()
	if got := readAll(t, r); !bytes.Equal(got, want) {
		t.Fatalf("file of %d bytes (%d as the truncate then the plain write give); want %d", len(got), commonPrefix(got, want), len(want))
	}
}

// ownerExpired says whether the lease stored under prefix has expired by
// what its owner object says.
func ownerExpired(st staging.Store, prefix string) bool {
	b, _, err := st.Get(context.Background(), prefix+wal.Dir+wal.OwnerName, staging.Whole())
	var o struct{ Expires time.Time }
	return err == nil && json.Unmarshal(b, &o) == nil && time.Now().After(o.Expires)
}

// A WAL writer's record whose PUT lands only after its lease expired and
// another mount took it, replayed the records it found and published, is
// not acknowledged: the taker's checkpoint says it holds every record up
// to the last one it found, past this one, so the record is never
// replayed. Here the writer has two records in flight: the first held
// back, the second stored at once; its renewals fail (the owner object is
// out of reach), the lease expires, and the opener takes it, replays the
// second record and publishes. Before, the held record's write returned
// success once it landed, and was on no mount.
func TestWALRecordStoredAfterLeaseTakenIsNotAcknowledged(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	faults := faulty.New(st, 1)
	isRecord := func(key string) bool {
		_, ok := wal.ParseRecordName(key[strings.LastIndexByte(key, '/')+1:])
		return ok && strings.Contains(key, wal.Dir)
	}
	gate := newArmedGate(faults, isRecord)
	const prefix = "lt/"
	o := Options{Params: walParams(segment.FormatStream), FileID: prefix}
	o.Params.WALLeaseTTL = 150 * time.Millisecond
	l, err := Create(ctx, gate, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(l.Stat().BlockSize)
	write := func(off int64, s string) error {
		_, err := l.WriteAt(ctx, []byte(s), off)
		return err
	}
	if err := write(0, "first"); err != nil { // the lease is taken
		t.Fatal(err)
	}
	gate.armed.Store(true)
	held := make(chan error, 1)
	go func() { held <- write(10*bs, "held back") }()
	<-gate.arrived
	if err := write(20*bs, "stored"); err != nil {
		t.Fatal(err)
	}
	// The writer's renewals fail from now on; its lease expires.
	outage := faults.Add(faulty.Rule{Op: staging.OpAny, KeyPrefix: prefix + wal.Dir + wal.OwnerName, Kind: faulty.Error})
	for deadline := time.Now().Add(10 * time.Second); !ownerExpired(st, prefix); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease did not expire")
		}
	}
	taker, err := Open(ctx, st, prefix, o)
	if err != nil {
		t.Fatalf("open with the writer's lease expired: %v", err)
	}
	if taker.Stat().Cno == 0 {
		t.Fatalf("the opener did not replay and publish the records it found: %+v", taker.Stat())
	}
	taker.Close()
	close(gate.release) // the held record lands now
	faults.Remove(outage)
	heldErr := <-held
	crash(t, l)

	r, err := Open(ctx, st, prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAll(t, r)
	at := func(off int64, n int) string {
		if off+int64(n) > int64(len(got)) {
			return ""
		}
		return string(got[off : off+int64(n)])
	}
	if at(0, 5) != "first" || at(20*bs, 6) != "stored" {
		t.Fatalf("acknowledged writes before the take lost: %q at 0, %q at %d", at(0, 5), at(20*bs, 6), 20*bs)
	}
	if heldErr == nil && at(10*bs, 9) != "held back" {
		t.Fatalf("a write acknowledged after its record landed past the lease is on no mount: %q at %d", at(10*bs, 9), 10*bs)
	}
	t.Logf("the held write: %v", heldErr)
}

// A file first written without the WAL: a plain writer opens it, a WAL
// writer's first change (a truncate, fsynced) marks its head, then the plain
// writer flushes a write it made before the truncate. The truncate was
// acknowledged before the flush began, so it goes under the write: the file
// is the truncate, then the write, in each of two rounds (the second over
// the first's bytes, where a lost truncate shows). On S3 an ETag is the MD5
// of the bytes: the mark, a rewrite of the head with only its metadata
// changed, kept the head's ETag, the plain writer's If-Match passed, and its
// head dropped the mark unseen: before the head's nonce, round 1 read 6,617
// bytes here (the truncate replayed over the write); through two mounts the
// campaign read 24,282 bytes, the first 6,617 as they should be (the
// truncate lost). The memory store's ETags are unique per write, so this
// runs on S3.
func TestWALMarkSeenByPlainWriterOpenedBefore(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := "plain writer opened again"
		if keep {
			name = "plain writer kept open"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := newS3Store(t)
			const prefix = "wm/"
			plain := Options{Params: smallParams(segment.FormatStream), FileID: prefix}
			c, err := Create(ctx, st, prefix, plain)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteAt(ctx, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			if err := c.Truncate(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			c.Close()

			wo := Options{Params: walParams(segment.FormatStream), FileID: prefix}
			var want []byte
			var p *File
			defer func() {
				if p != nil {
					p.Close()
				}
			}()
			for round, r := range []struct{ off, n, trunc int }{{0, 11_350, 0}, {9_069, 15_213, 6_617}} {
				w, err := Open(ctx, st, prefix, wo)
				if err != nil {
					t.Fatal(err)
				}
				if p == nil || !keep {
					if p != nil {
						p.Close()
					}
					p = mustOpen(t, st, prefix, smallParams(segment.FormatStream))
				}
				mine := pattern(r.n, uint64(round+2))
				if _, err := p.WriteAt(ctx, mine, int64(r.off)); err != nil {
					t.Fatal(err)
				}
				if err := w.Truncate(ctx, int64(r.trunc)); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Flush(ctx); err != nil { // the fsync: acknowledged
					t.Fatal(err)
				}
				if _, err := p.Flush(ctx); err != nil {
					t.Fatalf("round %d: the plain writer's flush: %v", round, err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				want = append(want[:min(len(want), r.trunc)], make([]byte, max(0, r.trunc-len(want)))...)
				want = append(want, make([]byte, max(0, r.off+r.n-len(want)))...)
				copy(want[r.off:], mine)
				rd := mustOpen(t, st, prefix, smallParams(segment.FormatStream))
				got := readAll(t, rd)
				rd.Close()
				if !bytes.Equal(got, want) {
					t.Fatalf("round %d: a file of %d bytes, the first %d as the truncate then the write give; want %d", round, len(got), commonPrefix(got, want), len(want))
				}
			}
		})
	}
}
