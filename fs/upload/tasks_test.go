package upload_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// partResult is what the tasks of these tests leave.
type partResult struct {
	part int32
	note string
}

// TestTasksUpload builds an object as sending ahead does: its parts as
// tasks at once, then a task that completes it, each result taken in by
// the owner; with faults at the part and the completion.
func TestTasksUpload(t *testing.T) {
	cases := []struct {
		name   string
		rule   *faulty.Rule
		failed bool
		object bool
	}{
		{"no fault", nil, false, true},
		{"part 2 error", &faulty.Rule{Op: staging.OpUploadPart, Nth: 2, Kind: faulty.Error}, true, false},
		{"complete error", &faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.Error}, true, false},
		{"complete lost", &faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.LostAnswer}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rg := newRig(c.rule, 2)
			u := rg.u
			ctx := context.Background()
			tasks := upload.NewTasks[partResult](u, ctx, nil)
			defer tasks.Stop()
			var reqs atomic.Int64
			m := u.Create("f/3.1")
			pieces := [][]byte{pattern(chunk, 1), pattern(chunk, 2), pattern(chunk, 3), pattern(10, 4)}
			for _, p := range pieces {
				tasks.Go(partResult{part: m.Reserve()}, func(ctx context.Context, r *partResult) error {
					_, err := m.PartGiven(ctx, r.part, p, &reqs)
					return err
				})
			}
			var failed error
			for range pieces {
				res, ok, err := tasks.Next(ctx, true)
				if err != nil || !ok || res.Panic != nil {
					t.Fatalf("Next: %+v %v %v", res, ok, err)
				}
				failed = errors.Join(failed, res.Err)
			}
			if failed == nil {
				tasks.Go(partResult{}, func(ctx context.Context, r *partResult) error {
					return m.Complete(ctx, &reqs)
				})
				res, _, _ := tasks.Next(ctx, true)
				failed = res.Err
			}
			if failed != nil {
				tasks.Go(partResult{}, func(ctx context.Context, r *partResult) error { m.Abort(ctx, &reqs); return nil })
				tasks.Next(ctx, true)
			}
			if (failed != nil) != c.failed {
				t.Fatalf("failed: %v, want a failure: %v", failed, c.failed)
			}
			var want []byte
			if c.object {
				want = slices.Concat(pieces...)
			}
			rg.check(t, "f/3.1", want, &reqs)
			if n := upload.Held(u); n != 0 {
				t.Fatalf("%d slots still taken", n)
			}
		})
	}
}

// TestTasksCap: tasks hold a slot each while they run, their requests
// take no other, and those beyond the cap wait.
func TestTasksCap(t *testing.T) {
	for _, cap := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(cap), func(t *testing.T) {
			const n = 9
			g := newGate(mem.New(), cap, n)
			u := upload.New(upload.Config{Store: g, Concurrency: cap, ChunkSize: 1 << 10})
			upload.SetWaiting(u, g.waiting)
			ctx := context.Background()
			m := u.Create("f/1.1")
			tasks := upload.NewTasks[partResult](u, ctx, nil)
			defer tasks.Stop()
			for i := range n {
				tasks.Go(partResult{part: m.Reserve()}, func(ctx context.Context, r *partResult) error {
					return m.Part(ctx, r.part, pattern(100, byte(i)), nil)
				})
			}
			for range n {
				res, _, err := tasks.Next(ctx, true)
				if err != nil || res.Err != nil {
					t.Fatal(err, res.Err)
				}
			}
			// The abort of a task takes no second slot: with every slot
			// taken by tasks, it would find none free (and wait).
			g.mu.Lock()
			g.free = true
			g.mu.Unlock()
			for range cap {
				tasks.Go(partResult{}, func(ctx context.Context, r *partResult) error { m.Abort(ctx, nil); return nil })
			}
			for range cap {
				tasks.Next(ctx, true)
			}
			if g.refused != 0 {
				t.Fatalf("%d requests of tasks waited for a second slot", g.refused)
			}
			if g.most != cap || g.started != n {
				t.Fatalf("at most %d requests in flight of %d, want the cap, %d", g.most, g.started, cap)
			}
			if n := openUploads(t, g); n != 0 {
				t.Fatalf("%d uploads left open", n)
			}
		})
	}
}

// TestTasksPanic: a task's panic comes back with its result, as the task
// left it, and its slot is free.
func TestTasksPanic(t *testing.T) {
	u := upload.New(upload.Config{Store: mem.New(), Concurrency: 1, ChunkSize: chunk})
	ctx := context.Background()
	tasks := upload.NewTasks[partResult](u, ctx, nil)
	defer tasks.Stop()
	if _, ok, err := tasks.Next(ctx, false); ok || err != nil {
		t.Fatalf("a result before any task: %v %v", ok, err)
	}
	tasks.Go(partResult{part: 7}, func(ctx context.Context, r *partResult) error {
		r.note = "set"
		panic("boom")
	})
	res, ok, err := tasks.Next(ctx, true)
	if !ok || err != nil || res.Panic != "boom" || len(res.Stack) == 0 {
		t.Fatalf("Next: %+v %v %v, want the panic", res, ok, err)
	}
	if res.Value.part != 7 || res.Value.note != "set" {
		t.Fatalf("result %+v, not as the task left it", res.Value)
	}
	if n := upload.Held(u); n != 0 {
		t.Fatalf("%d slots still taken after the task", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok, err := tasks.Next(cctx, true); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on an ended context: %v %v", ok, err)
	}
}

// TestTasksStop: Stop cancels the tasks running and runs those waiting
// for a slot on the cancelled context, and waits for them all.
func TestTasksStop(t *testing.T) {
	u := upload.New(upload.Config{Store: mem.New(), Concurrency: 1, ChunkSize: chunk})
	tasks := upload.NewTasks[partResult](u, context.Background(), nil)
	started := make(chan struct{})
	var ran, cancelled atomic.Int64
	tasks.Go(partResult{}, func(ctx context.Context, r *partResult) error {
		close(started)
		<-ctx.Done() // runs until Stop
		ran.Add(1)
		return nil
	})
	<-started
	for range 3 {
		tasks.Go(partResult{}, func(ctx context.Context, r *partResult) error {
			ran.Add(1)
			if ctx.Err() != nil {
				cancelled.Add(1)
			}
			return nil
		})
	}
	tasks.Stop()
	if ran.Load() != 4 || cancelled.Load() != 3 {
		t.Fatalf("%d tasks ran, %d of the waiting ones cancelled; want 4 and 3", ran.Load(), cancelled.Load())
	}
	if n := upload.Held(u); n != 0 {
		t.Fatalf("%d slots still taken", n)
	}
	if _, ok, _ := tasks.Next(context.Background(), false); ok {
		t.Fatal("a result kept after Stop")
	}
}

// settle takes o's tasks in and moves it along until it is finished (or
// nothing is in flight and it is still open: Busy), as an owner does.
func settle(t *testing.T, tasks *upload.Tasks[string], o *upload.Object[string]) upload.Outcome {
	t.Helper()
	for {
		if out := tasks.Advance(o); out != upload.Busy {
			if again := tasks.Advance(o); again != upload.Busy {
				t.Fatalf("said finished twice: %v, %v", out, again)
			}
			return out
		}
		if tasks.Pending() == 0 {
			return upload.Busy
		}
		res, ok, err := tasks.Next(context.Background(), true)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if res.Obj != o || res.Value != "tag" {
			t.Fatalf("a result of %p tagged %q, want %p and the object's tag", res.Obj, res.Value, o)
		}
	}
}

// TestObject sends an object as sending ahead does, its tasks moving it
// along: a multipart upload of pieces then closed, or one request whole;
// with a fault at each request, a failure of the owner's and a panic.
func TestObject(t *testing.T) {
	pieces := [][]byte{pattern(chunk, 1), pattern(chunk, 2), pattern(33, 3)}
	cases := []struct {
		name  string
		whole bool
		rule  *faulty.Rule
		fail  bool // the owner fails it before it closes
		panic bool // a piece's task panics
		want  upload.Outcome
	}{
		{"pieces", false, nil, false, false, upload.Stored},
		{"pieces, part 2 error", false, &faulty.Rule{Op: staging.OpUploadPart, Nth: 2, Kind: faulty.Error}, false, false, upload.Failed},
		{"pieces, part 3 lost", false, &faulty.Rule{Op: staging.OpUploadPart, Nth: 3, Kind: faulty.LostAnswer}, false, false, upload.Failed},
		{"pieces, complete error", false, &faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.Error}, false, false, upload.Failed},
		{"pieces, complete lost", false, &faulty.Rule{Op: staging.OpCompleteMultipart, Kind: faulty.LostAnswer}, false, false, upload.Stored},
		{"pieces, abort error", false, &faulty.Rule{Op: staging.OpAbortMultipart, Kind: faulty.Error}, true, false, upload.Failed},
		{"pieces, failed by the owner", false, nil, true, false, upload.Failed},
		{"pieces, a panic", false, nil, false, true, upload.Failed},
		{"whole", true, nil, false, false, upload.Stored},
		{"whole, put lost", true, &faulty.Rule{Op: staging.OpPut, Kind: faulty.LostAnswer}, false, false, upload.Stored},
		{"whole, put error", true, &faulty.Rule{Op: staging.OpPut, Kind: faulty.Error}, false, false, upload.Failed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(c.rule, 2)
			ctx := context.Background()
			var reqs atomic.Int64
			tasks := upload.NewTasks[string](r.u, ctx, &reqs)
			defer tasks.Stop()
			o := tasks.NewObject("tag")
			body := slices.Concat(pieces...)
			if c.whole {
				o.Close()
				tasks.GoFor(o, upload.Whole, func(ctx context.Context, tag *string) error {
					_, err := r.u.PutGiven(ctx, "f/1.1", slices.Clone(body), &reqs)
					return err
				})
			} else {
				m := r.u.Create("f/1.1")
				o.SetUpload(m)
				for i, p := range pieces {
					n := m.Reserve()
					tasks.GoFor(o, upload.Piece, func(ctx context.Context, tag *string) error {
						if c.panic && i == 1 {
							panic("piece")
						}
						return m.Part(ctx, n, p, &reqs)
					})
				}
				// Open: nothing completes it before it closes; a failure
				// aborts it at once.
				for tasks.Pending() > 0 && o.Failed() == nil {
					if _, _, err := tasks.Next(ctx, true); err != nil {
						t.Fatal(err)
					}
					if out := tasks.Advance(o); out != upload.Busy {
						t.Fatalf("an open object: %v", out)
					}
				}
				if c.fail {
					o.Fail(errors.New("given up"))
				}
				if o.Failed() == nil {
					o.Close()
				}
			}
			if out := settle(t, tasks, o); out != c.want {
				t.Fatalf("the object came to %v (failure %v), want %v", out, o.Failed(), c.want)
			}
			if o.Stored() != (c.want == upload.Stored) || (o.Failed() != nil) != (c.want == upload.Failed) {
				t.Fatalf("stored %v, failure %v: not what Advance said", o.Stored(), o.Failed())
			}
			var want []byte
			if c.want == upload.Stored {
				want = body
			}
			if c.name == "pieces, abort error" {
				// Left for the cleaner: the abort's failure is not the
				// object's.
				if o.Failed().Error() != "given up" {
					t.Fatalf("failure %v, want the owner's", o.Failed())
				}
				if n := openUploads(t, r.ms); n != 1 {
					t.Fatalf("%d uploads open, want the one whose abort failed", n)
				}
				return
			}
			r.check(t, "f/1.1", want, &reqs)
		})
	}
}
