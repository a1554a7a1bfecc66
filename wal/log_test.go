package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestGroupCommit(t *testing.T) {
	const n = 64
	cnt := counting.New(link.New(mem.New(), link.Profile{Name: "test", Latency: 20 * time.Millisecond}))
	l := openLog(t, cnt, Options{})
	cnt.Reset()

	seqs := make([]uint64, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			seqs[i], errs[i] = l.Append(context.Background(), []Op{writeOp(int64(i)*8, fmt.Sprintf("op-%04d", i))})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}

	puts := cnt.Snapshot().Op(staging.OpPut).Requests
	st := l.Stats()
	if puts != st.Records || st.Ops != n || st.Failed != 0 {
		t.Fatalf("%d PUTs, stats %+v; want PUTs = records and %d ops", puts, st, n)
	}
	if puts >= n/2 {
		t.Fatalf("%d PUTs for %d concurrent appends: no group commit", puts, n)
	}
	t.Logf("%d appends in %d records", n, puts)

	distinct := slices.Compact(slices.Sorted(slices.Values(seqs)))
	if int64(len(distinct)) != puts {
		t.Fatalf("appends returned %d distinct seqs for %d records", len(distinct), puts)
	}
	if got := mustList(t, cnt); !slices.Equal(got, distinct) {
		t.Fatalf("stored records %v, appends returned %v", got, distinct)
	}
	if l.Last() != distinct[len(distinct)-1] {
		t.Fatalf("Last() = %d, want %d", l.Last(), distinct[len(distinct)-1])
	}

	// Every op is in exactly one record: the one its Append returned.
	seen := make(map[int64]uint64)
	for _, seq := range distinct {
		r, err := l.Read(context.Background(), seq)
		if err != nil {
			t.Fatalf("read %d: %v", seq, err)
		}
		for _, op := range r.Ops {
			i := op.Off / 8
			if prev, dup := seen[op.Off]; dup {
				t.Fatalf("op %d in records %d and %d", i, prev, seq)
			}
			seen[op.Off] = seq
			if want := fmt.Sprintf("op-%04d", i); string(op.Data) != want || seqs[i] != seq {
				t.Fatalf("record %d holds %q at op %d, want %q from the append that returned %d", seq, op.Data, i, want, seqs[i])
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("records hold %d ops, want %d", len(seen), n)
	}
}

// TestBatching queues appends behind a PUT held in flight (one at a time) and
// checks how they group into records.
func TestBatching(t *testing.T) {
	op := func(name string, n int) Op { return Op{Kind: OpWrite, Data: []byte(strings.Repeat(name, n))} }
	small := EncodedSize([]Op{op("b", 100), op("c", 100)}) // two 100-byte writes fill it
	for _, tc := range []struct {
		name  string
		batch int
		ops   []Op     // one Append each; the first is held in flight alone
		want  []string // the records that follow the first, as op names
	}{
		{"one batch", 0, []Op{op("a", 1), op("b", 100), op("c", 100), op("d", 100)}, []string{"bcd"}},
		{"full batch splits", small, []Op{op("a", 1), op("b", 100), op("c", 100), op("d", 100)}, []string{"bc", "d"}},
		{"large op alone", small, []Op{op("a", 1), op("b", 100), op("e", 1000), op("c", 100)}, []string{"b", "e", "c"}},
		{"large op first", small, []Op{op("a", 1), op("e", 1000), op("b", 100)}, []string{"e", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate(mem.New())
			l := openLog(t, g, Options{BatchBytes: tc.batch, MaxInFlight: 1})
			var wg sync.WaitGroup
			got := make([]uint64, len(tc.ops))
			for i, o := range tc.ops {
				wg.Go(func() { got[i] = mustAppend(t, l, o) })
				if i == 0 {
					<-g.started // the first is in flight, the others queue behind it
				} else {
					waitFor(t, "append queued", func() bool { return queuedOps(l) == i })
				}
			}
			close(g.open)
			wg.Wait()

			var names []string
			for seq := got[0] + 1; seq <= l.Last(); seq++ {
				r, err := l.Read(context.Background(), seq)
				if err != nil {
					t.Fatalf("read %d: %v", seq, err)
				}
				var s string
				for _, o := range r.Ops {
					s += string(o.Data[0])
				}
				names = append(names, s)
			}
			if got[0] != 1 || !slices.Equal(names, tc.want) {
				t.Fatalf("first record %d, then records %q; want 1 then %q", got[0], names, tc.want)
			}
		})
	}
}

// TestAppendCancelledLeader: the leader's cancel does not fail the record it
// sends for others.
func TestAppendCancelledLeader(t *testing.T) {
	g := newGate(mem.New())
	l := openLog(t, g, Options{MaxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() { _, errA = l.Append(ctx, []Op{writeOp(0, "a")}) })
	<-g.started
	wg.Go(func() { _, errB = l.Append(context.Background(), []Op{writeOp(1, "b")}) })
	waitFor(t, "b queued", func() bool { return queuedOps(l) == 1 })
	cancel()
	close(g.open)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("appends: %v, %v", errA, errB)
	}
	if got := mustList(t, g); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("records %v, want [1 2]", got)
	}
	if _, err := l.Append(ctx, []Op{writeOp(2, "c")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("append with a cancelled ctx: %v", err)
	}
}

func TestAppendFailures(t *testing.T) {
	rec1 := RecordKey(testPrefix, 1)
	for _, tc := range []struct {
		name   string
		rule   faulty.Rule
		retry  bool        // the store retries server errors, as the S3 client does
		tear   bool        // the first PUT of record 1 stores half of it and fails
		first  error       // what the first Append returns (nil: success)
		stored []uint64    // records after two Appends
		stats  Stats       // Records and Failed
		check  func(error) // more about the first error
	}{
		{
			name:   "put fails",
			rule:   faulty.Rule{Op: staging.OpPut, KeyPrefix: rec1, Kind: faulty.Error},
			first:  faulty.ErrInjected,
			stored: []uint64{2},
			stats:  Stats{Records: 1, Failed: 1},
		},
		{
			name:   "answer lost",
			rule:   faulty.Rule{Op: staging.OpPut, KeyPrefix: rec1, Nth: 1, Kind: faulty.LostAnswer},
			first:  faulty.ErrInjected,
			stored: []uint64{2}, // the record landed, and went: its write failed
			stats:  Stats{Records: 1, Failed: 1},
		},
		{
			name:   "answer lost, retried",
			rule:   faulty.Rule{Op: staging.OpPut, KeyPrefix: rec1, Nth: 1, Kind: faulty.LostAnswer},
			retry:  true,
			stored: []uint64{1, 2},
			stats:  Stats{Records: 2},
		},
		{
			name:   "put fails, retried",
			rule:   faulty.Rule{Op: staging.OpPut, KeyPrefix: rec1, Nth: 1, Kind: faulty.Error},
			retry:  true,
			stored: []uint64{1, 2},
			stats:  Stats{Records: 2},
		},
		{
			name:   "head fails after a lost answer",
			rule:   faulty.Rule{Op: staging.OpHead, KeyPrefix: rec1, Kind: faulty.Error},
			retry:  true,
			first:  faulty.ErrInjected,
			stored: []uint64{2},
			stats:  Stats{Records: 1, Failed: 1},
		},
		{
			name:   "torn by a cut upload, retried",
			tear:   true,
			retry:  true,
			stored: []uint64{1, 2},
			stats:  Stats{Records: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			f := faulty.New(mem, 1)
			var st staging.Store = f
			if tc.tear {
				st = &tearStore{Store: f, key: rec1}
			}
			if tc.retry {
				st = &retryStore{Store: st, attempts: 3}
			}
			if tc.name == "head fails after a lost answer" {
				f.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: rec1, Nth: 1, Kind: faulty.LostAnswer})
			}
			l := openLog(t, st, Options{})
			if !tc.tear {
				f.Add(tc.rule)
			}
			seq, err := l.Append(context.Background(), []Op{writeOp(0, "first")})
			if tc.first == nil {
				if err != nil || seq != 1 {
					t.Fatalf("first append: %d, %v; want 1", seq, err)
				}
			} else {
				if !errors.Is(err, tc.first) || errors.Is(err, ErrTaken) {
					t.Fatalf("first append: %v, want %v", err, tc.first)
				}
				if !strings.Contains(err.Error(), "append wal record 1 of "+testPrefix) {
					t.Fatalf("first append: %q names no record", err)
				}
			}
			if seq, err := l.Append(context.Background(), []Op{writeOp(8, "second")}); err != nil || seq != 2 {
				t.Fatalf("second append: %d, %v; want 2 (the seq of a failed record is skipped)", seq, err)
			}
			if got := mustList(t, mem); !slices.Equal(got, tc.stored) {
				t.Fatalf("records %v, want %v", got, tc.stored)
			}
			for _, s := range tc.stored {
				if _, err := ReadRecord(context.Background(), mem, testPrefix, testTag, s); err != nil {
					t.Fatalf("record %d: %v", s, err)
				}
			}
			if st := l.Stats(); st.Records != tc.stats.Records || st.Failed != tc.stats.Failed {
				t.Fatalf("stats %+v, want %+v", st, tc.stats)
			}
			// A record of ours that landed is covered and deleted like others.
			l.Covered(2)
			if err := l.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got := mustList(t, mem); len(got) != 0 {
				t.Fatalf("records %v after covering all", got)
			}
		})
	}
}

func TestAppendTaken(t *testing.T) {
	mem := mem.New()
	cnt := counting.New(mem)
	l := openLog(t, cnt, Options{})
	mustAppend(t, l, writeOp(0, "one")) // seq 1
	// Another writer, unaware of this one, creates the next record.
	key := RecordKey(testPrefix, 2)
	if _, err := mem.Put(context.Background(), key, []byte("theirs"), staging.PutOptions{Metadata: map[string]string{writeIDMeta: "someone-else"}}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Append(context.Background(), []Op{writeOp(0, "two")})
	var te *TakenError
	if !errors.Is(err, ErrTaken) || !errors.As(err, &te) || te.Key != key || te.Writer != "someone-else" {
		t.Fatalf("append over a taken record: %v", err)
	}
	if !strings.Contains(err.Error(), "wal record "+key+" was written by another writer") {
		t.Fatalf("error %q", err)
	}
	// The log has failed: later appends fail without a PUT.
	before := cnt.Snapshot()
	if _, err := l.Append(context.Background(), []Op{writeOp(0, "three")}); !errors.Is(err, ErrTaken) {
		t.Fatalf("append after the failure: %v", err)
	}
	if puts := cnt.Snapshot().Sub(before).Op(staging.OpPut).Requests; puts != 0 {
		t.Fatalf("%d PUTs after the log failed", puts)
	}
	if got := mustList(t, mem); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("records %v", got)
	}
}

func TestAppendRefusesBadOps(t *testing.T) {
	cnt := counting.New(mem.New())
	l := openLog(t, cnt, Options{})
	cnt.Reset()
	for _, tc := range []struct {
		name string
		op   Op
		why  string
	}{
		{"kind 0", Op{}, "unknown op kind 0"},
		{"kind 5", Op{Kind: 5}, "unknown op kind 5"},
		{"negative off", Op{Kind: OpWrite, Off: -1, Data: []byte("x")}, "negative"},
		{"write len mismatch", Op{Kind: OpWrite, Len: 2, Data: []byte("x")}, "write of len 2 with 1 data bytes"},
		{"zero with data", Op{Kind: OpZero, Len: 1, Data: []byte("x")}, "zero op with data"},
		{"zero past the limit", Op{Kind: OpZero, Off: MaxOffset, Len: 1}, "past"},
		{"truncate with len", Op{Kind: OpTruncate, Len: 1}, "truncate with len 1"},
		{"mtime with off", Op{Kind: OpMtime, Off: 1}, "mtime op with off 1"},
	} {
		_, err := l.Append(context.Background(), []Op{writeOp(0, "ok"), tc.op})
		if err == nil || !strings.Contains(err.Error(), "op 1: ") || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: append: %v, want %q", tc.name, err, tc.why)
		}
	}
	if seq, err := l.Append(context.Background(), nil); seq != 0 || err != nil {
		t.Errorf("append of no ops: %d, %v", seq, err)
	}
	if puts := cnt.Snapshot().Op(staging.OpPut).Requests; puts != 0 {
		t.Fatalf("%d PUTs for refused appends", puts)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{{BatchBytes: -1}, {BatchBytes: 6 << 30}, {MaxInFlight: -1}, {LeaseTTL: -time.Second}, {LeaseTTL: time.Millisecond}} {
		if _, err := Open(context.Background(), mem.New(), testPrefix, o); err == nil {
			t.Errorf("Open with %+v succeeded", o)
		}
	}
	if _, err := Open(context.Background(), mem.New(), "/abs/", Options{}); !errors.Is(err, staging.ErrInvalidKey) {
		t.Errorf("Open of an absolute prefix: %v", err)
	}
	// Next is kept when past every record, and 0 is 1.
	for _, tc := range []struct{ next, want uint64 }{{0, 1}, {1, 1}, {40, 40}} {
		mem := mem.New()
		l := openLog(t, mem, Options{Next: tc.next})
		if seq := mustAppend(t, l, writeOp(0, "x")); seq != tc.want {
			t.Errorf("Next %d: first seq %d, want %d", tc.next, seq, tc.want)
		}
	}
}

func TestCovered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		previous int      // records left by a log before this one
		appends  int      // records this log appends
		covered  uint64   // Covered(covered) before Close
		failDel  uint64   // a seq whose delete fails (0: none)
		wait     bool     // wait for the background deletes before Close
		found    []uint64 // Found()
		after    []uint64 // records after Close
	}{
		{name: "background", appends: 5, covered: 3, wait: true, after: []uint64{4, 5}},
		{name: "close waits", appends: 5, covered: 5, after: nil},
		{name: "found at open", previous: 3, appends: 2, covered: 4, found: []uint64{1, 2, 3}, after: []uint64{5}},
		{name: "failed delete", appends: 4, covered: 3, failDel: 2, after: []uint64{2, 4}},
		{name: "nothing covered", previous: 1, appends: 1, found: []uint64{1}, after: []uint64{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			f := faulty.New(mem, 1)
			if tc.previous > 0 {
				prev := openLog(t, mem, Options{})
				for i := range tc.previous {
					mustAppend(t, prev, writeOp(int64(i), "old"))
				}
				if err := prev.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.failDel != 0 {
				f.Add(faulty.Rule{Op: staging.OpDelete, KeyPrefix: RecordKey(testPrefix, tc.failDel), Kind: faulty.Error})
			}
			l := openLog(t, f, Options{})
			if got := l.Found(); !slices.Equal(got, tc.found) {
				t.Fatalf("Found() = %v, want %v", got, tc.found)
			}
			for i := range tc.appends {
				want := uint64(tc.previous + i + 1)
				if seq := mustAppend(t, l, writeOp(int64(i), "new")); seq != want {
					t.Fatalf("append %d: seq %d, want %d", i, seq, want)
				}
			}
			if tc.covered > 0 {
				l.Covered(tc.covered)
			}
			if tc.wait {
				waitFor(t, "covered records deleted", func() bool { return slices.Equal(mustList(t, mem), tc.after) })
			}
			if err := l.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got := mustList(t, mem); !slices.Equal(got, tc.after) {
				t.Fatalf("records after close %v, want %v", got, tc.after)
			}
			if ok, err := Exists(context.Background(), mem, testPrefix); err != nil || ok != (len(tc.after) > 0) {
				t.Fatalf("Exists after close: %v, %v (the lease is released)", ok, err)
			}
		})
	}
}

func TestClose(t *testing.T) {
	t.Run("waits for appends in flight", func(t *testing.T) {
		mem := mem.New()
		g := newGate(mem)
		l := openLog(t, g, Options{})
		var wg sync.WaitGroup
		var appendErr error
		wg.Go(func() { _, appendErr = l.Append(context.Background(), []Op{writeOp(0, "a")}) })
		<-g.started
		closed := make(chan error, 1)
		go func() { closed <- l.Close(context.Background()) }()
		waitFor(t, "close started", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.closed })
		if _, err := l.Append(context.Background(), []Op{writeOp(1, "b")}); !errors.Is(err, ErrClosed) {
			t.Fatalf("append during close: %v", err)
		}
		select {
		case err := <-closed:
			t.Fatalf("close returned (%v) with a PUT in flight", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(g.open)
		if err := <-closed; err != nil {
			t.Fatalf("close: %v", err)
		}
		wg.Wait()
		if appendErr != nil {
			t.Fatalf("append in flight: %v", appendErr)
		}
		if got := mustList(t, mem); !slices.Equal(got, []uint64{1}) {
			t.Fatalf("records %v", got)
		}
		if _, _, err := mem.Get(context.Background(), testPrefix+Dir+OwnerName, staging.Whole()); !errors.Is(err, staging.ErrNotFound) {
			t.Fatalf("owner after close: %v", err)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatalf("second close: %v", err)
		}
	})
	t.Run("ctx ends first", func(t *testing.T) {
		mem := mem.New()
		g := newGate(mem)
		l := openLog(t, g, Options{})
		var wg sync.WaitGroup
		var appendErr error
		wg.Go(func() { _, appendErr = l.Append(context.Background(), []Op{writeOp(0, "a")}) })
		<-g.started
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("close: %v", err)
		}
		// The lease stays: a PUT still runs under it.
		if _, err := mem.Head(context.Background(), testPrefix+Dir+OwnerName); err != nil {
			t.Fatalf("owner after an interrupted close: %v", err)
		}
		close(g.open)
		wg.Wait()
		if appendErr != nil {
			t.Fatalf("append in flight: %v", appendErr)
		}
	})
}

func TestExistsList(t *testing.T) {
	put := func(st staging.Store, key string) {
		if _, err := st.Put(context.Background(), key, []byte("x"), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		keys   []string
		exists bool
		seqs   []uint64
	}{
		{"empty", nil, false, nil},
		{"other files only", []string{"vol/f/abcd/wal/00000000000000000001", "vol/f/abc/inode", "vol/f/abc/0000000001.0"}, false, nil},
		{"owner only", []string{testPrefix + Dir + OwnerName}, true, nil},
		{"records", []string{
			RecordKey(testPrefix, 12), RecordKey(testPrefix, 3), testPrefix + Dir + OwnerName,
			testPrefix + Dir + "junk", testPrefix + Dir + "00000000000000000000",
		}, true, []uint64{3, 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			for _, k := range tc.keys {
				put(mem, k)
			}
			cnt := counting.New(mem)
			ok, err := Exists(context.Background(), cnt, testPrefix)
			if err != nil || ok != tc.exists {
				t.Fatalf("Exists: %v, %v; want %v", ok, err, tc.exists)
			}
			if c := cnt.Snapshot(); c.Total().Requests != 1 {
				t.Fatalf("Exists made %s", c)
			}
			if got := mustList(t, mem); !slices.Equal(got, tc.seqs) {
				t.Fatalf("List: %v, want %v", got, tc.seqs)
			}
			// After: one List, true exactly when a record above seq exists.
			for _, seq := range []uint64{0, 2, 3, 11, 12, 13} {
				want := false
				for _, s := range tc.seqs {
					want = want || s > seq
				}
				cnt := counting.New(mem)
				got, err := After(context.Background(), cnt, testPrefix, seq)
				if err != nil || got != want || cnt.Snapshot().Total().Requests != 1 {
					t.Fatalf("After(%d): %v, %v (%s); want %v in one request", seq, got, err, cnt.Snapshot(), want)
				}
			}
		})
	}
	f := faulty.New(mem.New(), 1)
	f.Add(faulty.Rule{Op: staging.OpList, Kind: faulty.Error})
	if _, err := Exists(context.Background(), f, testPrefix); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Exists on a failing store: %v", err)
	}
	if _, err := List(context.Background(), f, testPrefix); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("List on a failing store: %v", err)
	}
}

func TestReadRecord(t *testing.T) {
	mem := mem.New()
	l := openLog(t, mem, Options{})
	ops := []Op{writeOp(10, "data"), {Kind: OpTruncate, Off: 12, MtimeNs: 5}}
	seq := mustAppend(t, l, ops...)
	r, err := ReadRecord(context.Background(), mem, testPrefix, testTag, seq)
	if err != nil || !opsEqual(r.Ops, []Op{norm(ops[0]), norm(ops[1])}) {
		t.Fatalf("ReadRecord: %+v, %v", r, err)
	}
	if _, err := ReadRecord(context.Background(), mem, testPrefix, testTag+1, seq); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read with another file's tag: %v", err)
	}
	if _, err := ReadRecord(context.Background(), mem, testPrefix, testTag, seq+1); !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("read of a missing record: %v", err)
	}
	// A record copied under another name is refused.
	b, _, _ := mem.Get(context.Background(), RecordKey(testPrefix, seq), staging.Whole())
	if _, err := mem.Put(context.Background(), RecordKey(testPrefix, 9), b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(context.Background(), 9); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), RecordKey(testPrefix, 9)) {
		t.Fatalf("read of a renamed record: %v", err)
	}
}

// TestTakenFailsQueued: batches queued behind the record that found its name
// taken fail with it, without a PUT.
func TestTakenFailsQueued(t *testing.T) {
	mem := mem.New()
	cnt := counting.New(mem)
	g := newGate(cnt)
	l := openLog(t, g, Options{MaxInFlight: 1, BatchBytes: EncodedSize([]Op{writeOp(0, "x")})})
	if _, err := mem.Put(context.Background(), RecordKey(testPrefix, 2), []byte("theirs"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cnt.Reset()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { _, errs[i] = l.Append(context.Background(), []Op{writeOp(int64(i), "x")}) })
		if i == 0 {
			<-g.started
		} else {
			waitFor(t, "append queued", func() bool { return queuedOps(l) == i })
		}
	}
	close(g.open)
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], ErrTaken) || !errors.Is(errs[2], ErrTaken) {
		t.Fatalf("appends: %v", errs)
	}
	if puts := cnt.Snapshot().Op(staging.OpPut).Requests; puts != 2 {
		t.Fatalf("%d PUTs, want 2 (the queued batch is not sent)", puts)
	}
	if st := l.Stats(); st.Records != 1 || st.Failed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// tearStore stores half of the first PUT of key and fails it, as a server
// that keeps what it received of an upload cut short.
type tearStore struct {
	staging.Store
	key  string
	done bool
}

func (s *tearStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if key == s.key && !s.done {
		s.done = true
		if _, err := s.Store.Put(ctx, key, data[:len(data)/2], opts); err != nil {
			return staging.ObjectInfo{}, err
		}
		return staging.ObjectInfo{}, fmt.Errorf("upload cut short: %w", faulty.ErrInjected)
	}
	return s.Store.Put(ctx, key, data, opts)
}
