package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
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
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
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
	var b strings.Builder
	b.WriteString("ckptfs " + v)
	if rev != "" {
		b.WriteString(" commit " + rev)
		if modified {
			b.WriteString("-modified")
		}
	} else {
		b.WriteString(" commit (devel)")
	}
	b.WriteString(" " + bi.GoVersion)
	return b.String()
}
