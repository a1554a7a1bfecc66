package main

import (
	"context"
	"reflect"
	"testing"
)

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
