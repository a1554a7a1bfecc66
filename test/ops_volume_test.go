package test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
)

// TestOpsVolumeCreation: without create a mount of a store that holds no
// volume fails before detaching with the line that says how to make one,
// and writes nothing; format creates it once; then the mount succeeds.
func TestOpsVolumeCreation(t *testing.T) {
	need(t, "fusermount3")
	bin := ckptfsBinary(t)
	v := newVolume(t)
	store, opts, env := s3Args(t, v)
	opts = strings.TrimSuffix(opts, ",create")
	ckptfs := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	dir := mountpoint(t)
	out, code := ckptfs("mount", "-o", opts, store, dir)
	want := "ckptfs mount: no ckptfs volume at " + store + ` (no ` + strings.TrimSuffix(store, "/") + `/ckptfs.json there); create one with "ckptfs format ` + store + `" or mount with -o create` + "\n"
	if code != 1 || out != want {
		t.Fatalf("mount of a store without a volume: exit %d\n%q\nwant\n%q", code, out, want)
	}
	if isMounted(t, dir) {
		t.Fatal("mounted anyway")
	}
	if n := countObjects(t, v.store(), ""); n != 0 {
		t.Fatalf("the refused mount wrote %d objects", n)
	}
	for _, tool := range []string{"ls", "fsck", "gc"} {
		if out, code := ckptfs(tool, "-o", opts, store); code != 1 || !strings.Contains(out, "no ckptfs volume at "+store) {
			t.Errorf("ckptfs %s of a store without a volume: exit %d, %q", tool, code, out)
		}
	}
	if out, code := ckptfs("format", "-o", formatNamespace(opts+",format=parted"), store); code != 0 {
		t.Fatalf("format: exit %d: %s", code, out)
	}
	if out, code := ckptfs("format", "-o", opts, store); code != 1 || !strings.Contains(out, "already a volume") {
		t.Fatalf("second format: exit %d: %s", code, out)
	}
	vol, err := ckvolume.ReadDescriptor(context.Background(), v.store(), "")
	if err != nil || vol.Format != "parted" {
		t.Fatalf("descriptor after format: %+v, %v", vol, err)
	}
	if out, code := ckptfs("mount", "-o", opts, store, dir); code != 0 {
		t.Fatalf("mount after format: exit %d: %s", code, out)
	}
	t.Cleanup(func() {
		if isMounted(t, dir) {
			runErr("", "fusermount3", "-u", dir)
		}
	})
	run(t, dir, "sh", "-c", "echo hi > f")
	run(t, "", "fusermount3", "-u", dir)
}
