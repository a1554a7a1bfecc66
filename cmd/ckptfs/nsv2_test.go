package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
)

// TestToolsNamespaceV2: format -o namespace=v2 makes a v2 volume; the tools
// read its names (ls, cat, info, cp --from it); fsck checks it, and gc
// cleans it: a named file stays, an unlinked one goes once its grace has
// passed; cp copies into it (a local file, another volume's, its own).
func TestToolsNamespaceV2(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := "file://" + root
	ckptfs := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(append([]string{"ckptfs"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := ckptfs("format", "-o", "namespace=v2", store); code != 0 || !strings.HasSuffix(out, " namespace=v2\n") {
		t.Fatalf("format -o namespace=v2: exit %d, %q, %q", code, out, errOut)
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := volume.ReadDescriptor(ctx, st, "")
	if err != nil || desc.LayoutVersion != 2 || desc.Namespace != "v2" {
		t.Fatalf("descriptor %+v, %v", desc, err)
	}
	ns, err := volume.OpenNames(ctx, st, "", desc, volume.NamesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns.Create(ctx, d.Ino, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	ef, err := engine.Create(ctx, st, volume.FilePrefix("", n.FileID), engine.Options{Params: engine.DefaultParams(), FileID: n.FileID})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("v2"), 3000)
	if _, err := ef.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ef.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ef.Close()
	ns.Close()

	if code, out, errOut := ckptfs("ls", store, "/d"); code != 0 || !strings.Contains(out, "file") || !strings.HasSuffix(strings.TrimSpace(out), " f") {
		t.Fatalf("ls /d: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := ckptfs("cat", store, "/d/f"); code != 0 || out != string(data) {
		t.Fatalf("cat /d/f: exit %d, %d bytes, %q", code, len(out), errOut)
	}
	if code, out, errOut := ckptfs("info", store, "/d/f"); code != 0 || !strings.Contains(out, n.FileID) {
		t.Fatalf("info /d/f: exit %d, %q, %q", code, out, errOut)
	}
	v1Root := t.TempDir()
	v1 := "file://" + v1Root
	if code, _, errOut := ckptfs("format", v1); code != 0 {
		t.Fatalf("format of a v1 volume: %s", errOut)
	}
	if code, _, errOut := ckptfs("cp", "--from", store, v1, "/d/f", "/g"); code != 0 {
		t.Fatalf("cp --from the v2 volume: exit %d, %q", code, errOut)
	}
	if code, out, errOut := ckptfs("cat", v1, "/g"); code != 0 || out != string(data) {
		t.Fatalf("cat of the copy out of the v2 volume: exit %d, %d bytes, %q", code, len(out), errOut)
	}

	local := filepath.Join(t.TempDir(), "local")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ckptfs("fsck", store); code != 0 || !strings.Contains(out, "names (ns2/): ") || !strings.Contains(out, " 1 files, 1 directories") {
		t.Fatalf("fsck of the v2 volume: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := ckptfs("fsck", store, "/d"); code != 0 || strings.Contains(out, "names (ns2/)") {
		t.Fatalf("fsck /d of the v2 volume: exit %d, %q, %q", code, out, errOut)
	}
	for _, args := range [][]string{{"gc", "--dry-run", store}, {"gc", "--grace", "0", "--ns-lag", "0", store}} {
		if code, out, errOut := ckptfs(args...); code != 0 {
			t.Fatalf("ckptfs %s: exit %d, %q, %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, out, errOut := ckptfs("cat", store, "/d/f"); code != 0 || out != string(data) {
		t.Fatalf("cat /d/f after gc: exit %d, %d bytes, %q", code, len(out), errOut)
	}
	// Unlinked, the file goes: the run that finds it orphaned, with no
	// grace, reaps it.
	ns, err = volume.OpenNames(ctx, st, "", desc, volume.NamesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Lookup(ctx, namespace.RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Unlink(ctx, d.Ino, "f"); err != nil {
		t.Fatal(err)
	}
	ns.Close()
	if code, out, errOut := ckptfs("gc", "--grace", "0", "--ns-lag", "0", store); code != 0 || !strings.Contains(out, "deleted orphaned file "+n.FileID) {
		t.Fatalf("gc after the unlink: exit %d, %q, %q", code, out, errOut)
	}
	if left, err := staging.ListAll(ctx, st, volume.FilePrefix("", n.FileID)); err != nil || len(left) != 0 {
		t.Fatalf("the unlinked file's objects after gc: %d, %v", len(left), err)
	}
	// cp into the v2 volume: a file of this machine, one of another volume,
	// and one of its own by reference, each built under a temporary name
	// and renamed over its own.
	for _, c := range [][]string{
		{"cp", "--local", store, local, "/h"},
		{"cp", "--from", v1, store, "/g", "/i"},
		{"cp", store, "/h", "/d/j"},
	} {
		if code, out, errOut := ckptfs(c...); code != 0 {
			t.Fatalf("ckptfs %s: exit %d, %q, %q", strings.Join(c, " "), code, out, errOut)
		}
	}
	for _, name := range []string{"/h", "/i", "/d/j"} {
		if code, out, errOut := ckptfs("cat", store, name); code != 0 || out != string(data) {
			t.Fatalf("cat %s of the copy into the v2 volume: exit %d, %d bytes, %q", name, code, len(out), errOut)
		}
	}
	if code, out, errOut := ckptfs("fsck", store); code != 0 || !strings.Contains(out, " 3 files, 1 directories") {
		t.Fatalf("fsck after the copies into the v2 volume: exit %d, %q, %q", code, out, errOut)
	}
	// A damaged name is reported by its key, exit 1.
	bad := "ns2/d/00/0000000000000001/00/zz"
	if _, err := st.Put(ctx, bad, []byte("damaged"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := ckptfs("fsck", store); code != 1 || !strings.Contains(out, "problem: "+bad) {
		t.Fatalf("fsck with a damaged name: exit %d, %q", code, out)
	}
}
