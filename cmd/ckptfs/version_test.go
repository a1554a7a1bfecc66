package main

import (
	"runtime/debug"
	"testing"

	"github.com/ckptfs/ckptfs/fs/fusefs"
)

// The metrics' ckptfs_build_info names the build as "ckptfs version" does.
func TestBuildOf(t *testing.T) {
	bi := debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := buildOf(&bi), (fusefs.BuildInfo{Version: "v1.2.3", Commit: "abc-modified", Go: "go1.99"}); got != want {
		t.Errorf("buildOf = %+v, want %+v", got, want)
	}
	if got, want := buildOf(&debug.BuildInfo{GoVersion: "go1.99"}), (fusefs.BuildInfo{Version: "(devel)", Commit: "(devel)", Go: "go1.99"}); got != want {
		t.Errorf("buildOf of an unknown build = %+v, want %+v", got, want)
	}
}
