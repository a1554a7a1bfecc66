package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

var updateMan = flag.Bool("update-man", false, "rewrite docs/man from the command tree")

// helpCommands is every command of the tree with its path, the root first.
func helpCommands(c *cobra.Command) [][]string {
	out := [][]string{strings.Fields(c.CommandPath())}
	for _, sub := range c.Commands() {
		out = append(out, helpCommands(sub)...)
	}
	return out
}

// TestHelpLayout: every command's help fits a terminal of helpWidth
// columns, has no Markdown table, and speaks of nothing but ckptfs; mount's
// shows each tunable's one default, the one mount uses.
func TestHelpLayout(t *testing.T) {
	root := newRootCmd(mountMain, nil, nil)
	for _, path := range helpCommands(root) {
		args := append(path, "--help")
		_, code, out, errOut := runStub(args, 0)
		if code != 0 || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
			continue
		}
		for i, line := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(line); n > helpWidth {
				t.Errorf("%q line %d has %d columns (> %d): %q", args, i+1, n, helpWidth, line)
			}
		}
		if strings.Contains(out, "|---") || strings.Contains(out, "| option |") {
			t.Errorf("%q prints a Markdown table", args)
		}
		for i, line := range strings.Split(out, "\n") {
			words := []string{"DESIGN.md", "design.md", "STYLE.md", "campaign"}
			if !strings.Contains(line, "bench") && path[len(path)-1] != "bench" {
				// bench reproduces tables whose origin its own text names.
				words = append(words, "seed")
			}
			for _, w := range words {
				if strings.Contains(line, w) {
					t.Errorf("%q line %d speaks of %q: %q", args, i+1, w, line)
				}
			}
		}
	}
	_, _, out, _ := runStub([]string{"ckptfs", "mount", "--help"}, 0)
	for _, want := range []string{
		"data_block_size=<size> (default 64K)",
		"stream_segment_bytes=<size> (default 64M)",
		"meta_block_size=<size> (default 4K)",
		"wal[=<boolean>] (default false)",
		"log=<debug|info|warn|error> (default warn)",
		"memory_limit=<size> (default RAM/4, from 256M to 8G)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mount --help lacks %q", want)
		}
	}
}

// TestManPages: "ckptfs man DIR" writes a page per command, the tunables in
// mount's, and docs/man holds what it writes (-update-man rewrites it).
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	_, code, _, errOut := runStub([]string{"ckptfs", "man", dir}, 0)
	if code != 0 {
		t.Fatalf("ckptfs man: exit %d: %s", code, errOut)
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.[18]"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pages {
		names[filepath.Base(p)] = true
	}
	for _, want := range []string{"ckptfs.1", "ckptfs-mount.1", "ckptfs-gc.1", "ckptfs-cat.1", "mount.ckptfs.8"} {
		if !names[want] {
			t.Errorf("no %s among %v", want, names)
		}
	}
	if names["ckptfs-man.1"] {
		t.Error("the hidden man command has a page")
	}
	mount, err := os.ReadFile(filepath.Join(dir, "ckptfs-mount.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Tunables", "data_block_size=<size> (default 64K)", "endpoint=URL"} {
		if !strings.Contains(string(mount), want) {
			t.Errorf("ckptfs-mount.1 lacks %q", want)
		}
	}
	// man mount.ckptfs: section 8, under the helper's name, with the
	// mount command's options.
	helper, err := os.ReadFile(filepath.Join(dir, "mount.ckptfs.8"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.TH "MOUNT.CKPTFS" "8"`, "mount.ckptfs - mount a ckptfs volume", `\fBmount.ckptfs STORE MOUNTPOINT`,
		"credentials_file=PATH", "data_block_size=<size> (default 64K)", "--foreground"} {
		if !strings.Contains(string(helper), want) {
			t.Errorf("mount.ckptfs.8 lacks %q", want)
		}
	}
	const docs = "../../docs/man"
	if *updateMan {
		old, _ := filepath.Glob(filepath.Join(docs, "*.[18]"))
		for _, p := range old {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(docs, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pages {
		got := manBody(t, p)
		dst := filepath.Join(docs, filepath.Base(p))
		if *updateMan {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := os.Stat(dst); err != nil || manBody(t, dst) != got {
			t.Errorf("%s differs from what ckptfs man writes: go test ./cmd/ckptfs -run TestManPages -update-man", dst)
		}
	}
}

// manBody is a page without its .TH line, which holds the month it was
// written.
func manBody(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, ".TH ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
