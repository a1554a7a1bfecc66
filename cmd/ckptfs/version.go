package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/fs/fusefs"
)

// newVersionCmd is "ckptfs version", the line "ckptfs --version" prints.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version (as ckptfs --version)",
		Args:  argsBetween(0, 0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), version())
			return err
		},
	}
}

// version is one line naming this build: the module version and the VCS
// commit it was built from ("-modified" when the tree had changes), or
// "(devel)" for what the build does not know.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "ckptfs (devel)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	b := buildOf(bi)
	return "ckptfs " + b.Version + " commit " + b.Commit + " " + b.Go
}

// buildInfo is this build as the mount's metrics name it
// (ckptfs_build_info): what version prints.
func buildInfo() fusefs.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fusefs.BuildInfo{Version: "(devel)", Commit: "(devel)"}
	}
	return buildOf(bi)
}

// buildOf reads the module version, the VCS commit ("-modified" when the
// tree had changes) and the Go version of bi; "(devel)" for what it does
// not know.
func buildOf(bi *debug.BuildInfo) fusefs.BuildInfo {
	b := fusefs.BuildInfo{Version: bi.Main.Version, Commit: "(devel)", Go: bi.GoVersion}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	rev, modified := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		b.Commit = rev
		if modified {
			b.Commit += "-modified"
		}
	}
	return b
}
