package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestParseMountArgs(t *testing.T) {
	cases := []struct {
		args    []string
		want    mountArgs
		wantErr string
	}{
		{[]string{"-o", "a=1,b", "-f", "s3://b/p", "/mnt"}, mountArgs{store: "s3://b/p", mountpoint: "/mnt", opts: []string{"a=1", "b"}, foreground: true}, ""},
		// mount(8) runs helpers as: STORE DIR [-sfnv] [-o options].
		{[]string{"s3://b", "/mnt", "-o", "rw,_netdev", "-n"}, mountArgs{store: "s3://b", mountpoint: "/mnt", opts: []string{"rw", "_netdev"}}, ""},
		{[]string{"-ox=1", "--foreground", "mem://", "/m"}, mountArgs{store: "mem://", mountpoint: "/m", opts: []string{"x=1"}, foreground: true}, ""},
		{[]string{"mem://"}, mountArgs{}, "want STORE and MOUNTPOINT"},
		{[]string{"mem://", "/m", "-o"}, mountArgs{}, "-o needs a value"},
		{[]string{"--frobnicate", "mem://", "/m"}, mountArgs{}, "unknown flag"},
	}
	for _, c := range cases {
		got, err := parseMountArgs(c.args)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseMountArgs(%q) error %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseMountArgs(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
}

func TestTakeStoreOpts(t *testing.T) {
	so, rest, err := takeStoreOpts([]string{"endpoint=http://h:1", "region=eu", "path_style", "profile=p", "log_file=/tmp/l", "ns_refresh=1s", "rw"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (storeOpts{endpoint: "http://h:1", region: "eu", profile: "p", pathStyle: true, logFile: "/tmp/l"}); so != want {
		t.Errorf("store options %+v, want %+v", so, want)
	}
	if !reflect.DeepEqual(rest, []string{"ns_refresh=1s", "rw"}) {
		t.Errorf("rest %q", rest)
	}
	for _, bad := range [][]string{{"endpoint="}, {"region"}, {"path_style=maybe"}} {
		if _, _, err := takeStoreOpts(bad); err == nil {
			t.Errorf("takeStoreOpts(%q) accepted", bad)
		}
	}
	if so, _, _ := takeStoreOpts([]string{"path_style=false"}); so.pathStyle {
		t.Error("path_style=false turned it on")
	}
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, good := range []string{"mem://", "file://" + dir} {
		if _, _, err := openStore(ctx, good, storeOpts{}); err != nil {
			t.Errorf("openStore(%s): %v", good, err)
		}
	}
	for _, bad := range []string{"file://relative/dir", "s3://", "ftp://x", "/just/a/path"} {
		if _, _, err := openStore(ctx, bad, storeOpts{}); err == nil {
			t.Errorf("openStore(%s) accepted", bad)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"ckptfs", "--help"}, {"ckptfs", "mount", "--help"}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, errOut.String())
		}
		for _, want := range []string{"s3://bucket", "endpoint=URL", "memory_limit", "flush_on_close", "mount.ckptfs"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%q does not mention %s", args, want)
			}
		}
	}
	var out, errOut strings.Builder
	if code := run([]string{"ckptfs", "frob"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
}
