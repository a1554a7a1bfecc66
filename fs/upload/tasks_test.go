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
	err  error
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
			tasks := upload.NewTasks[partResult](u, ctx)
			defer tasks.Stop()
			var reqs atomic.Int64
			m, err := u.Create(ctx, "f/3.1", &reqs)
			if err != nil {
				t.Fatal(err)
			}
			pieces := [][]byte{pattern(chunk, 1), pattern(chunk, 2), pattern(chunk, 3), pattern(10, 4)}
			for _, p := range pieces {
				tasks.Go(partResult{part: m.Reserve()}, func(ctx context.Context, r *partResult) {
					_, r.err = m.PartGiven(ctx, r.part, p, &reqs)
				})
			}
			var failed error
			for range pieces {
				res, ok, err := tasks.Next(ctx, true)
				if err != nil || !ok || res.Panic != nil {
					t.Fatalf("Next: %+v %v %v", res, ok, err)
				}
				failed = errors.Join(failed, res.Value.err)
			}
			if failed == nil {
				tasks.Go(partResult{}, func(ctx context.Context, r *partResult) {
					r.err = m.Complete(ctx, &reqs)
				})
				res, _, _ := tasks.Next(ctx, true)
				failed = res.Value.err
			}
			if failed != nil {
				tasks.Go(partResult{}, func(ctx context.Context, r *partResult) { m.Abort(ctx, &reqs) })
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
			m, err := u.Create(ctx, "f/1.1", nil)
			if err != nil {
				t.Fatal(err)
			}
			tasks := upload.NewTasks[partResult](u, ctx)
			defer tasks.Stop()
			for i := range n {
				tasks.Go(partResult{part: m.Reserve()}, func(ctx context.Context, r *partResult) {
					r.err = m.Part(ctx, r.part, pattern(100, byte(i)), nil)
				})
			}
			for range n {
				res, _, err := tasks.Next(ctx, true)
				if err != nil || res.Value.err != nil {
					t.Fatal(err, res.Value.err)
				}
			}
			// The abort of a task takes no second slot: with every slot
			// taken by tasks, it would find none free (and wait).
			g.mu.Lock()
			g.free = true
			g.mu.Unlock()
			for range cap {
				tasks.Go(partResult{}, func(ctx context.Context, r *partResult) { m.Abort(ctx, nil) })
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
	tasks := upload.NewTasks[partResult](u, ctx)
	defer tasks.Stop()
	if _, ok, err := tasks.Next(ctx, false); ok || err != nil {
		t.Fatalf("a result before any task: %v %v", ok, err)
	}
	tasks.Go(partResult{part: 7}, func(ctx context.Context, r *partResult) {
		r.err = errors.New("set")
		panic("boom")
	})
	res, ok, err := tasks.Next(ctx, true)
	if !ok || err != nil || res.Panic != "boom" || len(res.Stack) == 0 {
		t.Fatalf("Next: %+v %v %v, want the panic", res, ok, err)
	}
	if res.Value.part != 7 || res.Value.err == nil {
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
	tasks := upload.NewTasks[partResult](u, context.Background())
	started := make(chan struct{})
	var ran, cancelled atomic.Int64
	tasks.Go(partResult{}, func(ctx context.Context, r *partResult) {
		close(started)
		<-ctx.Done() // runs until Stop
		ran.Add(1)
	})
	<-started
	for range 3 {
		tasks.Go(partResult{}, func(ctx context.Context, r *partResult) {
			ran.Add(1)
			if ctx.Err() != nil {
				cancelled.Add(1)
			}
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
