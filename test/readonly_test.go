package test

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/test/faultproxy"
)

// TestReadOnlyMountSendsNoWrite: the built binary mounted with -o ro
// (wal=on too) through a proxy that refuses and records every request but
// GET and HEAD, as read-only credentials would, mounts, serves reads, and
// sends not one write request from its start to its unmount; ro with
// create is refused with a clear error.
func TestReadOnlyMountSendsNoWrite(t *testing.T) {
	need(t, "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	w := v.mount("")
	run(t, w.dir, "sh", "-c", "mkdir sub && echo hello > sub/greeting && seq 1 100000 > numbers")
	w.unmount()

	var mu sync.Mutex
	var writes []string
	proxy, err := faultproxy.Start(v.cfg.Endpoint, faultproxy.Rule{
		Error503: 1, // every request Match accepts is refused
		Match: func(r *http.Request) bool {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				return false
			}
			mu.Lock()
			writes = append(writes, r.Method+" "+r.URL.String())
			mu.Unlock()
			return true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	recorded := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), writes...) }
	store, _, env := s3Args(t, v)
	opts := "endpoint=" + proxy.URL() + ",path_style,region=" + v.cfg.Region + ",s3_retry_max_time=1s"
	dir := mountpoint(t)

	refused := exec.Command(bin, "mount", "-f", "-o", opts+",ro,create", store, dir)
	refused.Env = env
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "-o ro with -o create") {
		t.Fatalf("mount -o ro,create: %v, %s; want a refusal saying why", err, out)
	}

	logPath := filepath.Join(t.TempDir(), "mount.log")
	mnt := exec.Command(bin, "mount", "-f", "-o", withNamespace(opts)+",ro,wal=on,ns_refresh=100ms,log=debug,log_file="+logPath, store, dir)
	mnt.Env = env
	if err := mnt.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var mntErr error
	go func() { mntErr = mnt.Wait(); close(exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("the mount's log:\n%s", b)
		}
		select {
		case <-exited:
		default:
			_ = mnt.Process.Kill()
			<-exited
		}
		if isMounted(t, dir) {
			_, _ = runErr("", "fusermount3", "-uz", dir)
		}
	})
	waitFor(t, 30*time.Second, func() error {
		select {
		case <-exited:
			t.Fatalf("ckptfs mount -o ro exited: %v; writes %q", mntErr, recorded())
		default:
		}
		if !isMounted(t, dir) {
			return errors.New("not mounted yet")
		}
		return nil
	})

	if out := run(t, dir, "cat", "sub/greeting"); out != "hello\n" {
		t.Fatalf("sub/greeting: %q", out)
	}
	if out := run(t, dir, "sh", "-c", "tail -n1 numbers && ls -la sub >/dev/null && stat numbers >/dev/null"); out != "100000\n" {
		t.Fatalf("numbers ends with %q", out)
	}
	if out, err := runErr(dir, "sh", "-c", "echo more >> numbers"); err == nil || !strings.Contains(out, "Read-only file system") {
		t.Fatalf("append on a read-only mount: %v, %s; want EROFS", err, out)
	}
	run(t, "", "fusermount3", "-u", dir)
	select {
	case <-exited:
		if mntErr != nil {
			t.Fatalf("ckptfs mount after fusermount3 -u: %v", mntErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ckptfs mount did not exit within 30s of fusermount3 -u")
	}
	if w := recorded(); len(w) != 0 {
		t.Fatalf("the read-only mount sent %d write requests: %q", len(w), w)
	}
}
