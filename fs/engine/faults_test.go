package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// Faults during flushes: every flush succeeds or fails with the data still
// readable, a later flush succeeds, and a reader opening meanwhile always
// sees a whole checkpoint.
func TestFlushUnderFaults(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatParted, segment.FormatStream} {
		t.Run(fm.String(), func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			faults := faulty.New(mem, 1)
			p := smallParams(fm)
			p.DirtyLimit = 1 << 20 // faults only at the flush
			f := mustCreate(t, faults, "ff/", p)
			isPart0 := func(k string) bool { return strings.HasSuffix(k, ".0") }
			isData := func(k string) bool { return !isPart0(k) && !strings.HasSuffix(k, "/inode") }
			rules := []faulty.Rule{
				{Op: staging.OpPut, Match: isData, Nth: 1, Kind: faulty.Error},
				{Op: staging.OpPut, Match: isData, Nth: 1, Kind: faulty.LostAnswer},
				{Op: staging.OpPut, Match: isPart0, Nth: 1, Kind: faulty.Error},
				{Op: staging.OpPut, Match: isPart0, Nth: 1, Kind: faulty.LostAnswer},
				{Op: staging.OpPut, KeySuffix: "/inode", Nth: 1, Kind: faulty.Error},
				{Op: staging.OpPut, KeySuffix: "/inode", Nth: 1, Kind: faulty.LostAnswer},
				{Op: staging.OpHead, Nth: 1, Kind: faulty.Error},
			}
			var mu sync.Mutex
			saved := map[uint64][]byte{0: {}}
			seen := map[uint64][][]byte{}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // a reader that opens the file again and again, without faults
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					g, err := Open(ctx, mem, "ff/", Options{Params: p, FileID: "ff/"})
					if err != nil {
						t.Errorf("concurrent open: %v", err)
						return
					}
					content := readAll(t, g)
					mu.Lock()
					seen[g.Stat().Cno] = append(seen[g.Stat().Cno], content)
					mu.Unlock()
					g.Close()
				}
			}()
			r := rand.New(rand.NewPCG(5, 5))
			model := []byte{}
			failed := 0
			for round := 0; round < 60; round++ {
				off := r.IntN(60000)
				data := pattern(1+r.IntN(30000), uint64(round))
				if _, err := f.WriteAt(ctx, data, int64(off)); err != nil {
					t.Fatal(err)
				}
				if end := off + len(data); end > len(model) {
					model = append(model, make([]byte, end-len(model))...)
				}
				copy(model[off:], data)
				id := faults.Add(rules[round%len(rules)])
				_, err := f.Flush(ctx)
				faults.Remove(id)
				if err != nil {
					failed++
					if got := readAll(t, f); !bytes.Equal(got, model) {
						t.Fatalf("round %d: after a failed flush (%v) the data differs", round, err)
					}
					if _, err := f.Flush(ctx); err != nil {
						t.Fatalf("round %d: flush after the fault: %v", round, err)
					}
				}
				if got := readAll(t, mustOpen(t, mem, "ff/", p)); !bytes.Equal(got, model) {
					t.Fatalf("round %d: a fresh open reads other data", round)
				}
				mu.Lock()
				saved[f.Stat().Cno] = append([]byte(nil), model...)
				mu.Unlock()
			}
			close(stop)
			wg.Wait()
			if failed == 0 {
				t.Fatalf("no flush failed: the faults did not fire")
			}
			for cno, contents := range seen {
				want, ok := saved[cno]
				if !ok {
					t.Fatalf("a reader saw checkpoint %d, which no flush returned", cno)
				}
				for _, c := range contents {
					if !bytes.Equal(c, want) {
						t.Fatalf("a reader saw a mix in checkpoint %d", cno)
					}
				}
			}
			t.Logf("%d of 60 flushes failed; %d checkpoints seen by the reader", failed, len(seen))
		})
	}
}

// resendStore emulates an SDK that resends a conditional head write whose
// answer was lost: the first send lands, the resend is refused (the ETag
// moved), and the caller sees the refusal.
type resendStore struct {
	staging.Store
	armed atomic.Bool
}

func newResendStore(st staging.Store, armed bool) *resendStore {
	s := &resendStore{Store: st}
	s.armed.Store(armed)
	return s
}

func (s *resendStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, data, opts)
	if err != nil || !strings.HasSuffix(key, "/inode") || !s.armed.CompareAndSwap(true, false) {
		return info, err
	}
	return s.Store.Put(ctx, key, data, opts)
}

func TestLostHeadAnswer(t *testing.T) {
	for _, kind := range []string{"lost", "resent"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			var st staging.Store
			faults := faulty.New(mem, 1)
			rs := newResendStore(mem, false)
			if kind == "lost" {
				faults.Add(faulty.Rule{Op: staging.OpPut, KeySuffix: "/inode", Nth: 2, Kind: faulty.LostAnswer})
				st = faults
			} else {
				st = rs
			}
			p := smallParams(segment.FormatStream)
			f := mustCreate(t, st, "h/", p)
			rs.armed.Store(true)
			data := pattern(3000, 9)
			if _, err := f.WriteAt(ctx, data, 0); err != nil {
				t.Fatal(err)
			}
			ft, err := f.Flush(ctx)
			if err != nil {
				t.Fatalf("flush with a lost head answer: %v", err)
			}
			if kind == "lost" && faults.Injected() != 1 {
				t.Fatalf("fault fired %d times, want 1", faults.Injected())
			}
			if ft.Attempts != 1 || f.Stats().Conflicts != 0 {
				t.Fatalf("attempts %d, conflicts %d: want one attempt and no conflict", ft.Attempts, f.Stats().Conflicts)
			}
			cps, err := f.Checkpoints(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(cps) != 1 || cps[0].Inode.Cno != ft.Cno {
				t.Fatalf("checkpoints %+v, want exactly checkpoint %d", cps, ft.Cno)
			}
			// The head's ETag was learned: the next flush is not a conflict.
			if _, err := f.WriteAt(ctx, data, 5000); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil || f.Stats().Conflicts != 0 {
				t.Fatalf("next flush: %v, conflicts %d", err, f.Stats().Conflicts)
			}
		})
	}
}

// The read planner predicts exactly the GETs a read makes, on layouts built
// to make simple predictions wrong: overwritten middle blocks, partial
// segments, holes, and the request cap.
func TestReadPlanMatchesGets(t *testing.T) {
	for _, fm := range []segment.Format{segment.FormatParted, segment.FormatStream} {
		t.Run(fm.String(), func(t *testing.T) {
			ctx := context.Background()
			mem := mem.New()
			p := smallParams(fm)
			p.ReadGetMaxBytes = 4 * int64(p.DataBlockSize) // the cap splits stretches
			p.DirtyLimit = 16 * int64(p.DataBlockSize)     // partial segments
			bs := p.DataBlockSize
			f := mustCreate(t, mem, "rp/", p)
			if _, err := f.WriteAt(ctx, pattern(100*bs, 1), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(ctx, pattern(10*bs, 2), int64(40*bs)); err != nil { // middle
				t.Fatal(err)
			}
			if _, err := f.WriteAt(ctx, pattern(bs/2, 3), int64(71*bs+5)); err != nil { // one partial block
				t.Fatal(err)
			}
			if err := f.Zero(ctx, int64(80*bs), int64(5*bs)); err != nil { // holes
				t.Fatal(err)
			}
			if _, err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(ctx, pattern(3*bs, 4), int64(20*bs)); err != nil { // still dirty
				t.Fatal(err)
			}
			cnt := counting.New(mem)
			g := mustOpen(t, cnt, "rp/", p)
			for _, r := range []struct{ off, n int64 }{{0, int64(100 * bs)}, {int64(35 * bs), int64(20 * bs)}, {int64(70*bs + 100), int64(17 * bs)}} {
				plan, err := g.Plan(ctx, r.off, r.n)
				if err != nil {
					t.Fatal(err)
				}
				before := cnt.Snapshot()
				buf := make([]byte, r.n)
				if _, err := g.ReadAt(ctx, buf, r.off); err != nil {
					t.Fatal(err)
				}
				gets := cnt.Snapshot().Sub(before).Op(staging.OpGet).Requests
				if gets != int64(len(plan.Gets)) {
					t.Fatalf("read %d+%d: plan says %d GETs, the read made %d", r.off, r.n, len(plan.Gets), gets)
				}
				if len(plan.Gets) > 0 {
					// A second read is served from the cache: the plan knows.
					plan2, _ := g.Plan(ctx, r.off, r.n)
					b2 := cnt.Snapshot()
					g.ReadAt(ctx, buf, r.off)
					if got := cnt.Snapshot().Sub(b2).Op(staging.OpGet).Requests; got != int64(len(plan2.Gets)) {
						t.Fatalf("second read: plan %d GETs, made %d", len(plan2.Gets), got)
					}
				}
			}
			// The writer's own view: dirty blocks come from memory.
			plan, err := f.Plan(ctx, int64(20*bs), int64(3*bs))
			if err != nil || plan.Dirty != 3 || len(plan.Gets) != 0 {
				t.Fatalf("plan of dirty blocks: %+v, %v", plan, err)
			}
		})
	}
}

func TestFailFastRollbackReadsWinner(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p := smallParams(segment.FormatParted)
	p.ConflictPolicy = ConflictFailFast
	a := mustCreate(t, st, "ro/", p)
	b := mustOpen(t, st, "ro/", p)
	a.WriteAt(ctx, []byte("winner"), 0)
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.WriteAt(ctx, []byte("loser!!!"), 0)
	_, err := b.Flush(ctx)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("flush: %v, want ErrConflict", err)
	}
	if got := readAll(t, b); string(got) != "winner" {
		t.Fatalf("after rollback the loser reads %q", got)
	}
	// The loser can write and flush again on top of the winner.
	b.WriteAt(ctx, []byte("W"), 0)
	if _, err := b.Flush(ctx); err != nil {
		t.Fatalf("flush after rollback: %v", err)
	}
	if got := readAll(t, mustOpen(t, st, "ro/", p)); string(got) != "Winner" {
		t.Fatalf("fresh open reads %q", got)
	}
}

// tearingStore keeps half of the first PUT of a key with the suffix and
// fails it, as a server that keeps what it received of an upload cut short;
// like the S3 client, it then retries the request.
type tearingStore struct {
	staging.Store
	suffix string
	torn   bool
}

func (s *tearingStore) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if strings.HasSuffix(key, s.suffix) && !s.torn {
		s.torn = true
		if _, err := s.Store.Put(ctx, key, data[:len(data)/2], o); err != nil {
			return staging.ObjectInfo{}, err
		}
		// The retry finds the name taken (If-None-Match).
	}
	return s.Store.Put(ctx, key, data, o)
}

// A part 0 torn by a cut upload, with this writer's id on it, is not taken
// for a write whose answer was lost: the flush moves to new names.
func TestTornObjectIsNotLanded(t *testing.T) {
	ctx := context.Background()
	st := &tearingStore{Store: mem.New(), suffix: ".0"}
	p := smallParams(segment.FormatStream)
	p.EmbedMaxBytes = -1 // part 0 and the head one after the other
	f, err := Create(ctx, st, "t/", Options{Params: p, FileID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("torn?"), 300)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	ft, err := f.Flush(ctx)
	if err != nil {
		t.Fatalf("flush after a torn part 0: %v", err)
	}
	if !st.torn || ft.Attempts < 2 {
		t.Fatalf("flush %+v: the tear did not happen or was taken for a landed write", ft)
	}
	f.Close()
	g, err := Open(ctx, st, "t/", Options{Params: p, FileID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := readAll(t, g); !bytes.Equal(got, want) {
		t.Fatalf("read back: mismatch at %d", commonPrefix(got, want))
	}
}
