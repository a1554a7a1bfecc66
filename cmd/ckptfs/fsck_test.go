package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
)

// TestFsckPath: "fsck STORE /dir" checks the files under /dir and only
// them; a path that names nothing exits 1 saying so.
func TestFsckPath(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := "file://" + root
	var out, errOut strings.Builder
	if code := run([]string{"ckptfs", "format", store}, &out, &errOut); code != 0 {
		t.Fatalf("format exited %d: %s", code, errOut.String())
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, f := range []struct {
		dir  namespace.Ino
		name string
	}{{d.Ino, "a"}, {d.Ino, "b"}, {namespace.RootIno, "outside"}} {
		n, err := ns.Create(ctx, f.dir, f.name, 0o644, namespace.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		ef, err := engine.Create(ctx, st, "f/"+n.FileID+"/", engine.Options{Params: engine.DefaultParams(), FileID: n.FileID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ef.WriteAt(ctx, bytes.Repeat([]byte(f.name), 4000), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := ef.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ef.Close()
		ids[f.name] = n.FileID
	}
	ns.Close()
	// Damage the file outside /d: fsck of the volume finds it, fsck of /d
	// does not look at it.
	objs, err := staging.ListAll(ctx, st, "f/"+ids["outside"]+"/")
	if err != nil {
		t.Fatal(err)
	}
	bad := ""
	for _, o := range objs {
		if segment.IsObjectName(strings.TrimPrefix(o.Key, "f/"+ids["outside"]+"/")) {
			bad = o.Key
		}
	}
	b, _, err := st.Get(ctx, bad, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	b[3] ^= 0xff
	if _, err := st.Put(ctx, bad, b, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		args     []string
		code     int
		stdout   string // a line that must be there
		stderr   string
		notInOut string
	}{
		{[]string{store}, 1, "3 files,", "", ""},
		{[]string{store, "/d"}, 0, "2 files,", "", bad},
		{[]string{store, "d"}, 0, "2 files,", "", bad},
		{[]string{store, "/d/a"}, 0, "1 files,", "", bad},
		{[]string{store, "/outside"}, 1, "problem: " + bad, "", ""},
		{[]string{store, "/nope"}, 1, "", "ckptfs fsck: /nope: no such file or directory\n", "files,"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(append([]string{"ckptfs", "fsck"}, tt.args...), &out, &errOut)
			if code != tt.code || !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errOut.String(), tt.stderr) ||
				(tt.notInOut != "" && strings.Contains(out.String(), tt.notInOut)) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, tt.code, out.String(), errOut.String())
			}
		})
	}
}

// TestStoreErrorCauseFirst: an endpoint that does not resolve (.invalid
// never does) is said as the resolver said it, before the advice.
func TestStoreErrorCauseFirst(t *testing.T) {
	// Credentials present: no instance-role probe, only the lookup.
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	for _, tool := range []string{"fsck", "ls"} {
		var out, errOut strings.Builder
		code := run([]string{"ckptfs", tool, "-o", "endpoint=http://nonexistent.invalid:9", "s3://bkt"}, &out, &errOut)
		msg := errOut.String()
		cause := strings.Index(msg, "lookup bkt.nonexistent.invalid")
		if code != 1 || cause < 0 || strings.Index(msg, "no such host") < cause ||
			strings.Index(msg, "check endpoint=") < strings.Index(msg, "no such host") {
			t.Errorf("ckptfs %s with an endpoint that does not resolve: exit %d, %q; want the lookup's failure, then the advice", tool, code, msg)
		}
	}
}

// TestFsckNamesV2: fsck of a namespace v2 volume prints its names' counts,
// a file of two names counted once among the files and its two names as
// linked.
func TestFsckNamesV2(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := "file://" + root
	ckptfs := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(append([]string{"ckptfs"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := ckptfs("format", "-o", "namespace=v2", store); code != 0 {
		t.Fatalf("format: exit %d, %q, %q", code, out, errOut)
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := volume.ReadDescriptor(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := volume.OpenNames(ctx, st, "", desc, volume.NamesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ns.Create(ctx, namespace.RootIno, "a", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Link(ctx, a.Ino, d.Ino, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Create(ctx, d.Ino, "c", 0o644, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Symlink(ctx, namespace.RootIno, "s", "a", namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	ns.Close()
	code, out, errOut := ckptfs("fsck", store)
	if code != 0 || !strings.Contains(out, "names (ns2/): ") ||
		!strings.Contains(out, " objects, 2 files, 1 directories, 1 others, 2 linked names (hard links), 0 tombstones, 0 locked, 0 orphan records\n") {
		t.Fatalf("fsck of a v2 volume with a hard link: exit %d, %q, %q", code, out, errOut)
	}
}

// TestNamesLine: each count of nsv2.CheckReport in its place.
func TestNamesLine(t *testing.T) {
	for _, c := range []struct {
		r    nsv2.CheckReport
		want string
	}{
		{nsv2.CheckReport{}, "names (ns2/): 0 objects, 0 files, 0 directories, 0 others, 0 linked names (hard links), 0 tombstones, 0 locked, 0 orphan records"},
		{nsv2.CheckReport{Objects: 9, Files: 1, Dirs: 2, Others: 3, Linked: 4, Tombstones: 5, Locked: 6, Records: 7},
			"names (ns2/): 9 objects, 1 files, 2 directories, 3 others, 4 linked names (hard links), 5 tombstones, 6 locked, 7 orphan records"},
	} {
		if got := namesLine(&c.r); got != c.want {
			t.Errorf("namesLine(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}
