package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md's options table from Markdown()")

const (
	readmePath = "../README.md"
	tableBegin = "<!-- options:begin -->\n"
	tableEnd   = "<!-- options:end -->\n"
)

// TestREADMEOptions: the options table in README.md is Markdown()'s output,
// so that config is its one source; -update rewrites it.
func TestREADMEOptions(t *testing.T) {
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the %q ... %q markers", tableBegin, tableEnd)
	}
	got, want := s[i+len(tableBegin):j], "\n"+Markdown()+"\n"
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("README.md's options table differs from Markdown(): run go test ./config -run TestREADMEOptions -update")
	}
	s = s[:i+len(tableBegin)] + want + s[j:]
	if err := os.WriteFile(readmePath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
