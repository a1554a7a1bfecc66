package test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/test/faultproxy"
)

// Failures the campaign found, each reduced to the one fault or sequence
// that causes it, so that they can be fixed and kept fixed one by one.

// mountVia mounts v in this process through the store at endpoint (a
// faultproxy in front of the test's S3 server).
func mountVia(t *testing.T, v *volume, endpoint, opts string) *mount {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := v.cfg
	sc.Endpoint = endpoint
	st, err := s3.New(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	return mountStore(t, st, opts)
}

// onceMatching accepts the first request for which f is true, and no other.
func onceMatching(f func(*http.Request) bool) func(*http.Request) bool {
	var done atomic.Bool
	return func(r *http.Request) bool {
		return f(r) && done.CompareAndSwap(false, true)
	}
}

// TestCreateHeadAnswerLost: the answer to the PUT that creates a new file's
// head (If-None-Match: *) is lost; the SDK sends it again, the server says
// 412 because the first one landed, and creat(2) must still succeed: the
// head is the file's own (its write id says so), not another writer's.
// Found by the campaign as EEXIST from open(O_CREAT|O_EXCL) of a name that
// did not exist, in both modes.
func TestCreateHeadAnswerLost(t *testing.T) {
	for _, opts := range []string{"", "wal=on"} {
		t.Run("opts="+opts, func(t *testing.T) {
			v := newVolume(t)
			var lost atomic.Int64
			p, err := faultproxy.Start(v.cfg.Endpoint, faultproxy.Rule{
				LoseAnswer: 1,
				Match: onceMatching(func(r *http.Request) bool {
					return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/inode") && r.Header.Get("If-None-Match") == "*"
				}),
				OnFault: func(faultproxy.Event) { lost.Add(1) },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			m := mountVia(t, v, p.URL(), opts)
			f, err := os.OpenFile(m.path("new"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatalf("create with the head's answer lost (%d answers lost): %v", lost.Load(), err)
			}
			// Closed before any check: a file of this process left open
			// on its own mount would deadlock the process's exit.
			_, werr := f.WriteString("data")
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if werr != nil {
				t.Fatal(werr)
			}
			if lost.Load() != 1 {
				t.Fatalf("%d answers lost, want the head's", lost.Load())
			}
			if b, err := os.ReadFile(m.path("new")); err != nil || string(b) != "data" {
				t.Fatalf("read back: %q %v", b, err)
			}
		})
	}
}

// TestWALLeaseAnswerLost: with wal=on, the answer to the PUT that takes a
// file's WAL lease (wal/owner, If-None-Match: *) is lost; the SDK sends it
// again and the server answers 412 because the first one landed. The write
// that took the lease must succeed: the lease is the writer's own. Found by
// the campaign as EBUSY from writes and open(O_TRUNC) on a file's only
// writing mount, the mount's log saying the WAL "is held by writer ... (pid
// <the mount's own>)".
func TestWALLeaseAnswerLost(t *testing.T) {
	v := newVolume(t)
	var lost atomic.Int64
	p, err := faultproxy.Start(v.cfg.Endpoint, faultproxy.Rule{
		LoseAnswer: 1,
		Match: onceMatching(func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/wal/owner") && r.Header.Get("If-None-Match") == "*"
		}),
		OnFault: func(faultproxy.Event) { lost.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := mountVia(t, v, p.URL(), "wal=on")
	f, err := os.Create(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	// Closed before any check: a file of this process left open on its
	// own mount would deadlock the process's exit.
	_, werr := f.WriteString("data")
	cerr := f.Close()
	if lost.Load() != 1 {
		t.Fatalf("%d answers lost, want the lease's", lost.Load())
	}
	if werr != nil {
		t.Fatalf("write whose lease PUT lost its answer: %v", werr)
	}
	if cerr != nil {
		t.Fatal(cerr)
	}
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "data" {
		t.Fatalf("read back: %q %v", b, err)
	}
}
