package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// smallParams make every mechanism fire often on little data: small blocks
// and nodes (deep maps), small objects (many parts), a small dirty limit
// (partial segments).
func smallParams(f segment.Format) Params {
	p := DefaultParams()
	p.Format = f
	p.DataBlockSize = 512
	p.MetaBlockSize = 256
	p.MaxObjectBytes = 48 << 10
	p.DirtyLimit = 24 << 10
	p.ReadGetMaxBytes = 8 << 10
	p.CacheBytes = 16 << 10
	p.NodeCacheBytes = 32 << 10
	p.Concurrency = 4
	return p
}

// modelSeed is the seed of a randomized test: CKPTFS_SEED repeats a failure.
func modelSeed(t *testing.T) uint64 {
	if s := os.Getenv("CKPTFS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CKPTFS_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// modelRun drives a File and a plain byte slice with the same random
// operations and checks every answer. Flushed states are kept by checkpoint
// number and checked again through OpenAt.
type modelRun struct {
	t      *testing.T
	ctx    context.Context
	st     staging.Store
	prefix string
	opts   Options
	rng    *rand.Rand
	seed   uint64
	f      *File
	model  []byte
	saved  map[uint64][]byte // checkpoint number -> content
	maxOff int64
	bigW   int // the largest of the occasional big writes
	first  uint64
	flaky  bool   // the store fails some requests
	files  string // where the file and its copies live
	copies int    // copies tried
	clones int    // copies made, the run going on with each
}

func (m *modelRun) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d (rerun with CKPTFS_SEED=%d): %s", m.seed, m.seed, fmt.Sprintf(format, args...))
}

func (m *modelRun) randBytes(n int) []byte {
	b := make([]byte, n)
	// Runs of one byte compress the search space for bugs in block edges
	// while staying distinguishable from zeros.
	for i := 0; i < n; {
		run := min(n-i, 1+m.rng.IntN(700))
		b[i] = byte(1 + m.rng.IntN(255))
		for j := 1; j < run; j *= 2 {
			copy(b[i+j:i+run], b[i:i+j])
		}
		i += run
	}
	return b
}

func (m *modelRun) step() {
	ctx := m.ctx
	switch op := m.rng.IntN(100); {
	case op < 45: // write
		off := m.rng.Int64N(m.maxOff)
		n := 1 + m.rng.IntN(6000)
		if m.rng.IntN(10) == 0 {
			n = 1 + m.rng.IntN(m.bigW) // spanning many blocks and objects
		}
		p := m.randBytes(n)
		got, err := m.f.WriteAt(ctx, p, off)
		if err != nil || got != n {
			m.fatalf("write %d at %d: %d, %v", n, off, got, err)
		}
		if end := off + int64(n); end > int64(len(m.model)) {
			m.model = append(m.model, make([]byte, end-int64(len(m.model)))...)
		}
		copy(m.model[off:], p)
	case op < 50: // write by reference: the source keeps its bytes
		off := m.rng.Int64N(m.maxOff)
		n := 1 + m.rng.IntN(m.bigW)
		p := m.randBytes(n)
		if err := m.f.WriteRef(ctx, off, int64(n), bytes.NewReader(p), 0); err != nil {
			m.fatalf("write %d by reference at %d: %v", n, off, err)
		}
		if end := off + int64(n); end > int64(len(m.model)) {
			m.model = append(m.model, make([]byte, end-int64(len(m.model)))...)
		}
		copy(m.model[off:], p)
	case op < 70: // read
		off := m.rng.Int64N(m.maxOff + 1000)
		n := m.rng.IntN(20000)
		m.checkRead(m.f, m.model, off, n)
	case op < 76: // truncate
		size := m.rng.Int64N(m.maxOff)
		if err := m.f.Truncate(ctx, size); err != nil {
			m.fatalf("truncate %d: %v", size, err)
		}
		if size < int64(len(m.model)) {
			m.model = m.model[:size]
		} else {
			m.model = append(m.model, make([]byte, size-int64(len(m.model)))...)
		}
	case op < 81: // zero a range
		off := m.rng.Int64N(m.maxOff)
		n := m.rng.Int64N(8000)
		if err := m.f.Zero(ctx, off, n); err != nil {
			m.fatalf("zero %d+%d: %v", off, n, err)
		}
		for i := off; i < off+n && i < int64(len(m.model)); i++ {
			m.model[i] = 0
		}
	case op < 90: // flush
		m.flush()
	case op < 94: // reopen (after a flush, or dropping what is dirty)
		switch {
		case m.rng.IntN(2) == 0:
			m.flush()
			if err := m.f.Close(); err != nil {
				m.fatalf("close: %v", err)
			}
		case m.opts.Params.WAL:
			// A crash with the WAL: everything acknowledged is kept.
			crash(m.t, m.f)
		default:
			// A crash: what was not flushed is lost.
			m.model = append([]byte(nil), m.saved[m.f.Stat().Cno]...)
			if err := m.f.Close(); err != nil {
				m.fatalf("close: %v", err)
			}
		}
		f, err := Open(ctx, m.st, m.prefix, m.opts)
		for try := 0; err != nil && m.flaky && try < 50; try++ {
			f, err = Open(ctx, m.st, m.prefix, m.opts)
		}
		if errors.Is(err, ErrNotExist) && len(m.model) == 0 {
			// Never published: as the mount does, a missing head is an
			// empty file, created again.
			f, err = Create(ctx, m.st, m.prefix, m.opts)
		}
		if err != nil {
			m.fatalf("reopen: %v", err)
		}
		m.f = f
		m.checkAll(m.f, m.model)
	case op == 99: // become a copy by reference of the file (clone.go)
		m.becomeCopy()
	default: // an older checkpoint, read-only
		if len(m.saved) == 0 {
			return
		}
		cnos := make([]uint64, 0, len(m.saved))
		for c := range m.saved {
			cnos = append(cnos, c)
		}
		cno := cnos[m.rng.IntN(len(cnos))]
		if cno == 0 {
			return
		}
		old, err := OpenAt(ctx, m.st, m.prefix, cno, m.opts)
		if err != nil {
			m.fatalf("open at %d: %v", cno, err)
		}
		m.checkAll(old, m.saved[cno])
		if _, err := old.WriteAt(ctx, []byte{1}, 0); !errors.Is(err, ErrReadOnly) {
			m.fatalf("write to checkpoint %d: %v, want ErrReadOnly", cno, err)
		}
		old.Close()
	}
}

// becomeCopy copies the file by reference into a new file, which the run
// goes on with: writes, truncates, flushes, reopens and old checkpoints of a
// copy, of a copy of a copy, and so on (up to segment.MaxLineage deep),
// while the files it points into stay as they were.
func (m *modelRun) becomeCopy() {
	// The copy publishes what the file holds first: flushed here, the
	// checkpoint is the model's too.
	if !m.opts.Params.WAL {
		m.flush()
	}
	m.copies++
	id := fmt.Sprintf("%s-c%d", m.opts.FileID, m.copies)
	prefix := m.files + id + "/"
	opts := m.opts
	opts.FileID = id
	g, err := Create(m.ctx, m.st, prefix, opts)
	if err != nil {
		if m.flaky {
			return
		}
		m.fatalf("create the copy %s: %v", id, err)
	}
	err = g.CloneFrom(m.ctx, m.f)
	switch {
	case errors.Is(err, ErrCloneUnsupported):
		// The WAL, a lineage as deep as allowed, an empty source.
		g.Close()
		return
	case err != nil && m.flaky:
		g.Close()
		return
	case err != nil:
		m.fatalf("copy into %s: %v", id, err)
	}
	m.checkAll(g, m.model)
	if err := m.f.Close(); err != nil && !m.flaky {
		m.fatalf("close the source of a copy: %v", err)
	}
	m.f, m.prefix, m.opts = g, prefix, opts
	cno := g.Stat().Cno
	m.saved = map[uint64][]byte{cno: append([]byte(nil), m.model...)}
	m.first = cno
	m.clones++
}

func (m *modelRun) flush() {
	m.t.Helper()
	_, err := m.f.Flush(m.ctx)
	for try := 0; err != nil && m.flaky && try < 50; try++ {
		// Faults fail some flushes: the data must still read back, and a
		// later flush succeeds.
		m.checkAll(m.f, m.model)
		_, err = m.f.Flush(m.ctx)
	}
	if err != nil {
		m.fatalf("flush: %v", err)
	}
	if m.opts.Params.WAL {
		// The publish goes on in the background: half the time the run
		// goes on with it (reads are served from the pinned part 0);
		// otherwise it is waited for, recovered if it failed, and kept.
		if m.rng.IntN(2) == 0 {
			return
		}
		waitPublished(m.f)
		for try := 0; m.f.Stat().Dirty && try < 50; try++ {
			if _, err := m.f.Flush(m.ctx); err != nil && !m.flaky {
				m.fatalf("flush: %v", err)
			}
			waitPublished(m.f)
		}
		if m.f.Stat().Dirty {
			m.fatalf("still dirty after 50 flushes")
		}
	}
	cno := m.f.Stat().Cno
	m.saved[cno] = append([]byte(nil), m.model...)
	// Keep the contents of the most recent checkpoints only (and the first,
	// the oldest one reachable), so that memory stays bounded.
	const keep = 12
	for c := range m.saved {
		if c != 0 && c != m.first && c+keep*4 < cno {
			delete(m.saved, c)
		}
	}
	if m.first == 0 {
		m.first = cno
	}
}

func (m *modelRun) checkRead(f *File, model []byte, off int64, n int) {
	m.t.Helper()
	buf := make([]byte, n)
	got, err := f.ReadAt(m.ctx, buf, off)
	want := 0
	if off < int64(len(model)) {
		want = min(n, len(model)-int(off))
	}
	if got != want {
		m.fatalf("read %d at %d: got %d bytes (%v), want %d (size %d)", n, off, got, err, want, len(model))
	}
	if err != nil && !(errors.Is(err, io.EOF) && off+int64(n) >= int64(len(model))) {
		m.fatalf("read %d at %d: %v", n, off, err)
	}
	if want > 0 && !bytes.Equal(buf[:got], model[off:off+int64(got)]) {
		i := 0
		for i < got && buf[i] == model[off+int64(i)] {
			i++
		}
		m.fatalf("read %d at %d: mismatch at file offset %d: got %d want %d",
			n, off, off+int64(i), buf[i], model[off+int64(i)])
	}
}

func (m *modelRun) checkAll(f *File, model []byte) {
	m.t.Helper()
	if s := f.Size(); s != int64(len(model)) {
		m.fatalf("size %d, want %d", s, len(model))
	}
	m.checkRead(f, model, 0, len(model)+10)
}

func runModel(t *testing.T, st staging.Store, p Params, ops int, maxOff int64, bigW int) {
	runModelFlaky(t, st, p, ops, maxOff, bigW, false)
}

func runModelFlaky(t *testing.T, st staging.Store, p Params, ops int, maxOff int64, bigW int, flaky bool) {
	seed := modelSeed(t)
	ctx := context.Background()
	files := "model/f/"
	opts := Options{Params: p, FileID: "model-" + strconv.FormatUint(seed, 10)}
	prefix := files + opts.FileID + "/"
	f, err := Create(ctx, st, prefix, opts)
	for try := 0; err != nil && flaky && try < 50; try++ {
		f, err = Create(ctx, st, prefix, opts) // the fault fired before the head was stored
	}
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	m := &modelRun{t: t, ctx: ctx, st: st, prefix: prefix, opts: opts, rng: rand.New(rand.NewPCG(seed, 7)),
		seed: seed, f: f, saved: map[uint64][]byte{0: nil}, maxOff: maxOff, bigW: bigW, flaky: flaky, files: files}
	for i := 0; i < ops; i++ {
		m.step()
		if err := m.f.checkInvariants(); err != nil {
			m.fatalf("after op %d: %v", i, err)
		}
	}
	m.flush()
	m.checkAll(m.f, m.model)
	t.Logf("seed %d: %d ops, %d copies by reference, %d checkpoints, stats %+v", seed, ops, m.clones, len(m.saved), m.f.Stats())
}

// sendWholeParams send each object whole: targets below one piece, and
// dirty limits above them so the limits do not pre-empt sending.
func sendWholeParams() Params {
	p := smallParams(segment.FormatStream)
	p.StreamSegmentBytes = 8 << 10
	p.DirtyLimit = 96 << 10
	return p
}

// sendPiecesParams fill objects in pieces: pieces must be 5 MiB (the store's
// minimum part), so blocks and data are larger.
func sendPiecesParams() Params {
	p := DefaultParams()
	p.DataBlockSize = 4 << 10
	p.MetaBlockSize = 1 << 10
	p.ChunkSize = 5 << 20
	p.StreamSegmentBytes = 12 << 20
	p.MaxObjectBytes = 16 << 20
	p.DirtyLimit = 40 << 20
	p.ReadGetMaxBytes = 1 << 20
	p.CacheBytes = 1 << 20
	p.NodeCacheBytes = 1 << 20
	p.Concurrency = 3
	return p
}

// modelOps is how many steps a randomized model test takes: full, or short
// with -short, and a third of short under the race detector too, whose cost
// grows with the bytes a test moves (a short run of TestModelMem's four
// cases took four minutes there, the longest of the package): under it the
// tests look for races; the full-size runs, without it (scripts/test), for
// wrong answers.
func modelOps(full, short int) int {
	switch {
	case !testing.Short():
		return full
	case raceDetector:
		return short / 3
	}
	return short
}

func TestModelMem(t *testing.T) {
	ops := modelOps(100_000, 10_000)
	cases := []struct {
		name   string
		p      Params
		ops    int
		maxOff int64
		bigW   int
	}{
		{"parted", smallParams(segment.FormatParted), ops, 200_000, 40_000},
		{"stream", smallParams(segment.FormatStream), ops, 200_000, 40_000},
		{"stream-send-whole", sendWholeParams(), ops, 200_000, 40_000},
		{"stream-send-pieces", sendPiecesParams(), ops / 20, 48 << 20, 12 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runModel(t, mem.New(), c.p, c.ops, c.maxOff, c.bigW)
		})
	}
}

// The model test with sending ahead while the store fails a fraction of the
// uploads of objects in flight (and of the flush's own): nothing is lost.
func TestModelFaultsInFlight(t *testing.T) {
	ops := modelOps(20_000, 3_000)
	for _, c := range []struct {
		name string
		p    Params
		bigW int
		max  int64
	}{
		{"send-whole", sendWholeParams(), 40_000, 200_000},
		{"send-pieces", sendPiecesParams(), 12 << 20, 48 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			mem := mem.New()
			faults := faulty.New(mem, int64(modelSeed(t)))
			isData := func(k string) bool { return !strings.HasSuffix(k, "/inode") }
			for _, op := range []staging.Op{staging.OpPut, staging.OpUploadPart, staging.OpCompleteMultipart} {
				faults.Add(faulty.Rule{Op: op, Match: isData, Fraction: 0.05, Kind: faulty.Error})
				// Short runs upload few objects: the first of each kind
				// fails for certain.
				faults.Add(faulty.Rule{Op: op, Match: isData, Nth: 1, Kind: faulty.Error})
			}
			n := ops
			if c.name == "send-pieces" {
				n = ops / 20
			}
			runModelFlaky(t, faults, c.p, n, c.max, c.bigW, true)
			if faults.Injected() == 0 {
				t.Fatalf("no fault fired")
			}
		})
	}
}

// twoWriters drives two Files on one file of one store with random writes,
// appends, truncates, zeroed ranges and flushes. Each writer reads its base
// plus its own changes; every flush that succeeds must publish the serial
// order "the checkpoint published last, then this writer's changes since
// its base, in order" (a merge when the other writer published meanwhile).
// Appends followed by another change since the base are writes at the
// offsets they had (appendRun): the model takes them so.
type twoWriters struct {
	t         *testing.T
	ctx       context.Context
	st        staging.Store
	p         Params
	rng       *rand.Rand
	seed      uint64
	maxOff    int64
	f         [2]*File
	local     [2][]byte
	ops       [2][]mergeOp
	published []byte
	merges    int
}

func (m *twoWriters) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d (rerun with CKPTFS_SEED=%d): %s", m.seed, m.seed, fmt.Sprintf(format, args...))
}

func (m *twoWriters) check(what string, f *File, want []byte) {
	m.t.Helper()
	if s := f.Size(); s != int64(len(want)) {
		m.fatalf("%s: size %d, want %d", what, s, len(want))
	}
	buf := make([]byte, len(want)+10)
	n, err := f.ReadAt(m.ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		m.fatalf("%s: read: %v", what, err)
	}
	if !bytes.Equal(buf[:n], want) {
		i := 0
		for i < n && i < len(want) && buf[i] == want[i] {
			i++
		}
		m.fatalf("%s: %d bytes, want %d; first difference at %d", what, n, len(want), i)
	}
}

func (m *twoWriters) step() {
	i := m.rng.IntN(2)
	f := m.f[i]
	var op mergeOp
	switch k := m.rng.IntN(100); {
	case k < 8:
		n := 1 + m.rng.Int64N(3000)
		op = ap(n, byte(1+m.rng.IntN(255)))
		op.off = int64(len(m.local[i])) // where it lands in this writer's view
	case k < 50:
		n := 1 + m.rng.Int64N(3000)
		if m.rng.IntN(10) == 0 {
			n = 1 + m.rng.Int64N(m.maxOff/2)
		}
		op = wr(m.rng.Int64N(m.maxOff), n, byte(1+m.rng.IntN(255)))
	case k < 60:
		op = tr(m.rng.Int64N(m.maxOff))
	case k < 65:
		// Inside the writer's file mostly, past its end now and then (a
		// merge zeroes the winner's bytes there).
		size := int64(len(m.local[i]))
		if size == 0 || m.rng.IntN(3) == 0 {
			op = zr(m.rng.Int64N(m.maxOff), 1+m.rng.Int64N(3000))
			break
		}
		off := m.rng.Int64N(size)
		op = zr(off, 1+m.rng.Int64N(size-off))
	case k < 80:
		m.check(fmt.Sprintf("writer %d", i), f, m.local[i])
		return
	case k < 85:
		// A writer behind may pick names the other took: its blocks stay
		// dirty, and it moves to fresh names.
		f.mu.Lock()
		err := f.writePartialLocked(m.ctx)
		f.mu.Unlock()
		if err != nil && !errors.Is(err, errNameTaken) {
			m.fatalf("writer %d: partial segment: %v", i, err)
		}
		return
	default:
		m.flush(i)
		return
	}
	if err := op.do(m.ctx, f); err != nil {
		m.fatalf("writer %d: %+v: %v", i, op, err)
	}
	m.local[i] = op.apply(m.local[i])
	if !op.app {
		// The run of appends before it ends: they stay where they are.
		for j, o := range m.ops[i] {
			if o.app {
				m.ops[i][j].app = false
			}
		}
	}
	m.ops[i] = append(m.ops[i], op)
}

func (m *twoWriters) flush(i int) {
	m.t.Helper()
	want := append([]byte(nil), m.published...)
	for _, op := range m.ops[i] {
		want = op.apply(want)
	}
	ft, err := m.f[i].Flush(m.ctx)
	if err != nil {
		m.fatalf("writer %d: flush: %v", i, err)
	}
	if ft.Attempts == 0 {
		// Nothing to publish (the changes left the file as the writer saw
		// it, say a truncate to its size): the changes stay pending, and
		// the order "this writer's, then the other's" holds meanwhile.
		m.check(fmt.Sprintf("writer %d after a flush of nothing", i), m.f[i], m.local[i])
		return
	}
	if ft.Attempts > 1 {
		m.merges++
	}
	m.check(fmt.Sprintf("writer %d after its flush (%d attempts)", i, ft.Attempts), m.f[i], want)
	fresh, err := Open(m.ctx, m.st, "two/", Options{Params: m.p, FileID: "two/"})
	if err != nil {
		m.fatalf("open: %v", err)
	}
	m.check(fmt.Sprintf("a fresh open after writer %d's flush", i), fresh, want)
	fresh.Close()
	m.published, m.local[i], m.ops[i] = want, append([]byte(nil), want...), nil
}

// TestModelTwoWriters: two writers of one file, each merging onto the
// other's checkpoints (ConflictRetry), every published checkpoint checked
// against the serial model. A writer may fall many checkpoints behind, so
// its objects' names collide with the other's.
func TestModelTwoWriters(t *testing.T) {
	ops := modelOps(20_000, 2_000)
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"stream", smallParams(segment.FormatStream)},
		{"parted", smallParams(segment.FormatParted)},
		{"stream-send-whole", sendWholeParams()},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seed := modelSeed(t)
			m := &twoWriters{t: t, ctx: context.Background(), st: mem.New(), p: c.p,
				rng: rand.New(rand.NewPCG(seed, 11)), seed: seed, maxOff: 60_000}
			m.p.ConflictPolicy = ConflictRetry
			w := mustCreate(t, m.st, "two/", m.p)
			w.Close()
			for i := range m.f {
				m.f[i] = mustOpen(t, m.st, "two/", m.p)
				defer m.f[i].Close()
			}
			for n := 0; n < ops; n++ {
				m.step()
				for i, f := range m.f {
					if err := f.checkInvariants(); err != nil {
						m.fatalf("writer %d: %v", i, err)
					}
				}
			}
			m.flush(0)
			m.flush(1)
			t.Logf("seed %d: %d ops, %d merges", seed, ops, m.merges)
		})
	}
}
