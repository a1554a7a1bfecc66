package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
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
