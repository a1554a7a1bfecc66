package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// lsLine is a line of ckptfs ls: kind, size and cno, padded, then the name.
var lsLine = regexp.MustCompile(`^\S+ +\d+ +\d+ +(.*)$`)

// TestLsQuotesNames: ckptfs ls prints one line per entry whatever the names
// hold: a name with a newline, a tab, a byte that is not UTF-8, a leading
// double quote, a trailing space or " -> " is quoted with Go's escapes,
// which read back to the name; any other name, UTF-8 included, as it is.
func TestLsQuotesNames(t *testing.T) {
	s := "file://" + t.TempDir()
	if code, _, errOut := runCp("format", s); code != 0 {
		t.Fatalf("format: %s", errOut)
	}
	local := localFile(t, "f", []byte("hello"))
	quoted := []string{"a\nb", "tab\there", `"q"`, "bad\xffbyte", "trail ", "x -> y", "bell\a", "nbsp\u00a0"}
	plain := []string{"plain", "héllo wörld", "a\"b"}
	for _, name := range append(append([]string(nil), quoted...), plain...) {
		if code, _, errOut := runCp("cp", "--local", s, local, "/"+name); code != 0 {
			t.Fatalf("cp to %q: %s", name, errOut)
		}
	}
	code, out, errOut := runCp("ls", s)
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(quoted)+len(plain) {
		t.Fatalf("ls printed %d lines for %d entries:\n%s", len(lines), len(quoted)+len(plain), out)
	}
	names := map[string]bool{}
	for _, l := range lines {
		m := lsLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("ls line %q is not kind, size, cno, name", l)
		}
		names[m[1]] = true
	}
	for _, n := range quoted {
		if q := strconv.Quote(n); !names[q] {
			t.Errorf("ls does not print %q as %s:\n%s", n, q, out)
		}
	}
	for _, n := range plain {
		if !names[n] {
			t.Errorf("ls does not print %q as it is:\n%s", n, out)
		}
	}
}
