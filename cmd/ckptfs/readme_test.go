package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmePackageTable: README.md's table of packages names every command
// of the binary (the hidden ones too), every package under staging and
// every script, so that a new one is not left out of it.
func TestReadmePackageTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if name, rest, ok := strings.Cut(strings.TrimPrefix(line, "| `"), "` | "); ok && strings.HasPrefix(line, "| `") {
			rows[name] = rest
		}
	}
	has := func(row, name string) {
		t.Helper()
		if !strings.Contains(rows[row], "`"+name+"`") {
			t.Errorf("README.md's row of %s does not name `%s`", row, name)
		}
	}
	for _, c := range newRootCmd(mountMain, nil, nil).Commands() {
		if c.Name() != "help" {
			has("cmd/ckptfs", c.Name())
		}
	}
	dirs := func(path string) []string {
		entries, err := os.ReadDir(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if e.IsDir() && e.Name() != "testdata" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	for _, d := range dirs("../../staging") {
		has("staging", "staging/"+d)
	}
	entries, err := os.ReadDir("../../scripts")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		has("scripts", e.Name())
	}
}
