package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// gcMountOpts send small objects ahead, so that a flush in progress has
// objects above the head for the cleaner to leave alone.
const gcMountOpts = "data_block_size=4K,segment_max_object_bytes=8M,segment_mpu_chunk_size=5M,stream_segment_bytes=128K,flush_interval=0"

// fileOf finds the one file of a volume: its id and prefix.
func fileOf(t *testing.T, st staging.Store) (id, prefix string) {
	t.Helper()
	objs, err := staging.ListAll(context.Background(), st, ckvolume.FilesPrefix(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, ckvolume.FilesPrefix(""))
		if i, _, ok := strings.Cut(rest, "/"); ok {
			if id != "" && id != i {
				t.Fatalf("more than one file: %s and %s", id, i)
			}
			id = i
		}
	}
	if id == "" {
		t.Fatal("no file in the volume")
	}
	return id, ckvolume.FilePrefix("", id)
}

// readCheckpoint reads checkpoint cno of a file from the store.
func readCheckpoint(ctx context.Context, st staging.Store, prefix, id string, cno uint64) ([]byte, error) {
	f, err := engine.OpenAt(ctx, st, prefix, cno, engine.Options{FileID: id})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, f.Size())
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

func chainOf(t *testing.T, st staging.Store, prefix, id string) []uint64 {
	t.Helper()
	f, err := engine.Open(context.Background(), st, prefix, engine.Options{FileID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cps, err := f.Checkpoints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, c := range cps {
		out = append(out, c.Inode.Cno)
	}
	return out
}

// TestGCUnderLiveWriter: a mount rewrites, extends, truncates and fsyncs a
// file in a loop, sending small objects ahead, while the cleaner runs in a
// loop with --keep 3, no minimum age for finished work and a long grace
// period for work in progress (the rule that protects a writer is "never
// above the head", not the grace period: with grace 1h nothing the test
// makes is old enough for it). Afterwards every checkpoint the cleaner
// retained reads back exactly what was written when it was published, the
// newest three are the writer's last three, and the cleaner did delete.
func TestGCUnderLiveWriter(t *testing.T) {
	v := newVolume(t)
	m := v.mount(gcMountOpts)
	st := v.store()
	p := m.path("data")
	iterations := int(size(40, 15))

	type published struct {
		cno      uint64
		contents []byte
	}
	var (
		mu   sync.Mutex
		pubs []published
	)
	writerErr := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		writerErr <- func() error {
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			r := rand.New(rand.NewPCG(11, 12))
			var model []byte
			for i := range iterations {
				if i%5 == 4 && len(model) > 64<<10 {
					n := len(model) * 2 / 3
					if err := f.Truncate(int64(n)); err != nil {
						return err
					}
					model = model[:n]
				} else {
					off := r.IntN(len(model) + 1)
					data := make([]byte, 64<<10+r.IntN(600<<10))
					for j := range data {
						data[j] = byte(r.Uint32())
					}
					if _, err := f.WriteAt(data, int64(off)); err != nil {
						return err
					}
					if end := off + len(data); end > len(model) {
						model = append(model, make([]byte, end-len(model))...)
					}
					copy(model[off:], data)
				}
				if err := f.Sync(); err != nil {
					return err
				}
				b := make([]byte, 32)
				n, err := syscall.Getxattr(p, "user.ckptfs.cno", b)
				if err != nil {
					return err
				}
				cno, err := strconv.ParseUint(string(b[:n]), 10, 64)
				if err != nil {
					return err
				}
				mu.Lock()
				pubs = append(pubs, published{cno, slices.Clone(model)})
				mu.Unlock()
			}
			return nil
		}()
	}()

	opts := cleaner.Options{Keep: 3, Grace: time.Hour, MinAge: 0}
	ctx := context.Background()
	runs, deleted := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		rep, err := cleaner.CleanVolume(ctx, st, "", opts)
		if err != nil {
			<-done
			t.Fatalf("gc run %d under a live writer: %v", runs, err)
		}
		runs++
		deleted += len(rep.Deleted)
	}
	if err := <-writerErr; err != nil {
		t.Fatalf("writer: %v", err)
	}
	// One more run with the writer idle.
	rep, err := cleaner.CleanVolume(ctx, st, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	deleted += len(rep.Deleted)
	t.Logf("%d checkpoints published, %d gc runs, %d objects deleted", len(pubs), runs, deleted)
	if runs < 2 || deleted == 0 {
		t.Fatalf("%d gc runs deleted %d objects: the test proved nothing", runs, deleted)
	}

	id, prefix := fileOf(t, st)
	chain := chainOf(t, st, prefix, id)
	byCno := map[uint64][]byte{}
	for _, pb := range pubs {
		byCno[pb.cno] = pb.contents
	}
	var last3 []uint64
	for i := len(pubs) - 1; i >= 0 && len(last3) < 3; i-- {
		last3 = append(last3, pubs[i].cno)
	}
	if len(chain) < 3 || !slices.Equal(chain[:3], last3) {
		t.Fatalf("checkpoints after gc %v; want the writer's last three %v first", chain, last3)
	}
	for _, cno := range chain {
		want, ok := byCno[cno]
		if !ok {
			t.Fatalf("checkpoint %d on the chain was never published by the writer", cno)
		}
		got, err := readCheckpoint(ctx, st, prefix, id, cno)
		if err != nil {
			t.Fatalf("read retained checkpoint %d: %v", cno, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("checkpoint %d: %d bytes read differ from the %d written", cno, len(got), len(want))
		}
	}
	// The mount still reads the file as written last.
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, pubs[len(pubs)-1].contents) {
		t.Fatalf("file through the mount after gc: %v, equal %v", err, bytes.Equal(got, pubs[len(pubs)-1].contents))
	}
}

// TestGCDryRunAndUploads: on a volume made by a real mount, --dry-run
// deletes and aborts nothing while reporting what it would; an abandoned
// multipart upload is aborted once older than the grace period and a fresh
// one is not.
func TestGCDryRunAndUploads(t *testing.T) {
	v := newVolume(t)
	m := v.mount(gcMountOpts)
	st := v.store()
	p := m.path("data")
	r := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		b := make([]byte, 300<<10)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.unmount()
	ctx := context.Background()
	id, prefix := fileOf(t, st)
	chainBefore := chainOf(t, st, prefix, id)
	ups, err := st.ListMultipartUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	abandoned := prefix + "0000009999.1"
	if _, err := st.CreateMultipart(ctx, abandoned, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		objs, err := staging.ListAll(ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, o.Key)
		}
		return out
	}
	before := list()
	later := time.Now().Add(3 * time.Hour)
	rep, err := cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 1, Grace: time.Hour, DryRun: true, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) == 0 || len(rep.Aborted) != len(ups)+1 {
		t.Fatalf("dry run would delete %d objects and abort %d uploads; want some and %d", len(rep.Deleted), len(rep.Aborted), len(ups)+1)
	}
	if after := list(); !slices.Equal(before, after) {
		t.Fatalf("dry run changed the volume:\nbefore %v\nafter  %v", before, after)
	}
	// A fresh upload survives a real run.
	rep, err = cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 0, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Aborted) != 0 {
		t.Fatalf("aborted fresh uploads %v", rep.Aborted)
	}
	left, err := st.ListMultipartUploads(ctx, prefix)
	if err != nil || len(left) != 1 {
		t.Fatalf("uploads after gc: %v, %v; want the fresh one", left, err)
	}
	// Past the grace period it is aborted.
	rep, err = cleaner.CleanVolume(ctx, st, "", cleaner.Options{Keep: 0, Grace: time.Hour, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	var aborted []string
	for _, u := range rep.Aborted {
		aborted = append(aborted, u.Key)
	}
	if !slices.Contains(aborted, abandoned) {
		t.Fatalf("aborted %v; want %s", aborted, abandoned)
	}
	if left, err := st.ListMultipartUploads(ctx, prefix); err != nil || len(left) != 0 {
		t.Fatalf("uploads after aborting: %v, %v", left, err)
	}
	// The file still reads back at its head.
	chain := chainOf(t, st, prefix, id)
	if len(chain) < 4 || !slices.Equal(chain, chainBefore) {
		t.Fatalf("keep 0 left checkpoints %v; want all of %v", chain, chainBefore)
	}
	if _, err := readCheckpoint(ctx, st, prefix, id, chain[0]); err != nil {
		t.Fatal(err)
	}
}

// TestGCShortGraceSlowWriter: dd writes a file into a mount slowly, sending
// objects ahead, while `ckptfs gc --grace 1s --min-age 0` runs over and over:
// the objects sent ahead grow older than the grace period long before dd's
// close publishes them. The writer's marker keeps them; afterwards the file
// reads back exactly, through the mount (cmp) and from the store. (The writer
// is a process of its own: a close of a copy of its descriptor in a forked
// gc would publish a checkpoint.)
func TestGCShortGraceSlowWriter(t *testing.T) {
	need(t, "cmp", "dd")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	m := v.mount(gcMountOpts)
	store, opts, env := s3Args(t, v)
	const chunk = 64 << 10
	chunks := int(size(24, 12))
	want := make([]byte, chunks*chunk)
	r := rand.New(rand.NewPCG(21, 22))
	for i := range want {
		want[i] = byte(r.Uint32())
	}

	stop := make(chan struct{})
	gcDone := make(chan error, 1)
	var runs, deleted int
	go func() {
		gcDone <- func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				cmd := exec.Command(bin, "gc", "-o", opts, "--grace", "1s", "--min-age", "0", "--keep", "1", store)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				if err != nil {
					return fmt.Errorf("gc run %d: %v\n%s", runs, err, out)
				}
				runs++
				deleted += strings.Count(string(out), "\ndeleted ")
			}
		}()
	}()

	p := m.path("slow")
	dd := exec.Command("dd", "of="+p, "bs=64k", "iflag=fullblock", "status=none")
	in, err := dd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var ddOut bytes.Buffer
	dd.Stderr = &ddOut
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range chunks {
		if _, err := in.Write(want[i*chunk : (i+1)*chunk]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond) // slow: what was sent ahead ages past the grace period
	}
	in.Close()
	ddErr := dd.Wait()
	close(stop)
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
	if ddErr != nil {
		t.Fatalf("dd: %v\n%s", ddErr, ddOut.String())
	}
	t.Logf("%d gc runs while the file was written, %d objects deleted", runs, deleted)
	if runs < 3 {
		t.Fatalf("only %d gc runs: the test proved nothing", runs)
	}
	local := filepath.Join(t.TempDir(), "want")
	if err := os.WriteFile(local, want, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "", "cmp", local, p)
	st := v.store()
	id, prefix := fileOf(t, st)
	chain := chainOf(t, st, prefix, id)
	got, err := readCheckpoint(context.Background(), st, prefix, id, chain[0])
	if err != nil {
		t.Fatalf("read the file from the store: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the file in the store: %d bytes differ from the %d written", len(got), len(want))
	}
	if len(chain) != 1 {
		t.Fatalf("checkpoints %v: want the close's only", chain)
	}
}
