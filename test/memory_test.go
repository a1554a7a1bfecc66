package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestManyWritersSmallBudget: 64 processes each write a file at once through
// the built binary mounted with a small memory_limit; every file arrives
// whole and the mount's peak RSS stays near the budget.
func TestManyWritersSmallBudget(t *testing.T) {
	need(t, "cp", "cmp", "sh")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	dir := mountpoint(t)
	const budget = 64 << 20
	cmd := exec.Command(bin, "mount", "-f", "-o", withNamespace(opts)+fmt.Sprintf(",memory_limit=%d", budget), store, dir)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("mount exited: %v\n%s", err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("mount did not exit within 60s of SIGTERM")
		}
	}
	t.Cleanup(stop)
	waitFor(t, 30*time.Second, func() error {
		if !isMounted(t, dir) {
			return fmt.Errorf("not mounted yet")
		}
		return nil
	})

	n, per := 64, size(8<<20, 2<<20)
	src := filepath.Join(t.TempDir(), "src")
	randomFile(t, src, per)
	script := fmt.Sprintf("for i in $(seq 1 %d); do cp %s %s/f$i & done; wait", n, src, dir)
	run(t, "", "sh", "-c", script)

	peak := vmHWM(t, cmd.Process.Pid)
	t.Logf("peak RSS of the mount: %d MiB with memory_limit %d MiB", peak>>20, budget>>20)
	// The budget bounds dirty data and pieces in flight; the rest is the
	// runtime, the HTTP client and per-file state.
	if limit := int64(budget + 256<<20); peak > limit {
		t.Errorf("peak RSS %d MiB over %d MiB", peak>>20, limit>>20)
	}
	stop()

	m := v.mount("")
	for i := 1; i <= n; i++ {
		fi, err := os.Stat(m.path(fmt.Sprintf("f%d", i)))
		if err != nil || fi.Size() != per {
			t.Fatalf("f%d: %v, size %d, want %d", i, err, fi.Size(), per)
		}
	}
	for _, i := range []int{1, n / 2, n} {
		run(t, "", "cmp", src, m.path(fmt.Sprintf("f%d", i)))
	}
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
