package fusefs

import (
	"context"
	"fmt"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The chain read for .checkpoints is engine.File.Checkpoints' chain, read
// ahead: the same checkpoints, one request each when the numbers follow one
// another, a part 0 the cleaner removed ending it; a kept chain is served
// while the head does not move (a listing reads the head alone), and a
// lookup of one number reads its header alone.
func TestCheckpointChain(t *testing.T) {
	ctx := context.Background()
	st := counting.New(mem.New())
	fsys, n, f := newTestFile(t, st, config.MountDefault(1<<30))
	const cps = 40
	for i := 1; i <= cps; i++ {
		if _, err := f.WriteAt(ctx, []byte(fmt.Sprintf("%04d", i)), int64(4*(i-1))); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want, err := f.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()

	st.Reset()
	pts, err := fsys.ckptChain(ctx, n.FileID)
	if err != nil {
		t.Fatal(err)
	}
	reqs := st.Snapshot().Total().Requests
	if len(pts) != len(want) {
		t.Fatalf("chain of %d checkpoints, want %d", len(pts), len(want))
	}
	for i, p := range pts {
		if w := want[i].Inode; p.cno != w.Cno || p.size != int64(w.Size) || p.mtime != w.MtimeNs {
			t.Fatalf("checkpoint %d: %+v, want cno %d size %d", i, p, w.Cno, w.Size)
		}
	}
	t.Logf("%d checkpoints: %d requests", len(pts), reqs)
	if reqs > int64(len(pts))+1 {
		t.Errorf("reading a chain of %d checkpoints cost %d requests, want at most %d", len(pts), reqs, len(pts)+1)
	}
	st.Reset()
	if _, err := fsys.ckptChain(ctx, n.FileID); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.ckptOne(ctx, n.FileID, 7); err != nil {
		t.Fatal(err)
	}
	// A listing reads the head (it is current); the chain is kept.
	if reqs := st.Snapshot().Total().Requests; reqs != 1 {
		t.Errorf("a kept chain cost %d requests within the head's time to live, want 1 (the head)", reqs)
	}

	// A fresh mount's lookup of one number reads the head and its header.
	other, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	st.Reset()
	p, err := other.ckptOne(ctx, n.FileID, 7)
	if err != nil || p.cno != 7 || p.size != 28 {
		t.Fatalf("checkpoint 7: %+v, %v", p, err)
	}
	if reqs := st.Snapshot().Total().Requests; reqs > 2 {
		t.Errorf("a lookup of one checkpoint cost %d requests, want 2", reqs)
	}
	if _, err := other.ckptOne(ctx, n.FileID, cps+1); err != errNoCheckpoint {
		t.Errorf("checkpoint %d: %v, want none", cps+1, err)
	}

	// The cleaner removed checkpoint 10's part 0: the chain ends above it.
	name := segment.ObjectName{Cno: 10, Part: 0}
	if err := st.Delete(ctx, fsys.prefix(n.FileID)+name.String()); err != nil {
		t.Fatal(err)
	}
	third, err := New(ctx, st, Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	pts, err = third.ckptChain(ctx, n.FileID)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != cps-10 || pts[len(pts)-1].cno != 11 {
		t.Fatalf("chain after checkpoint 10 went: %d checkpoints ending at %d, want %d ending at 11", len(pts), pts[len(pts)-1].cno, cps-10)
	}
	if _, err := third.ckptOne(ctx, n.FileID, 10); err != errNoCheckpoint {
		t.Errorf("removed checkpoint 10: %v, want none", err)
	}
}
