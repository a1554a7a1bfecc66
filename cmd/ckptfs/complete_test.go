package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// complete runs cobra's hidden __complete command, as a shell's completion
// script does, and returns the candidates and the directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(append([]string{"ckptfs", "__complete"}, args...), &out, &errOut); code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, code, errOut.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCompleteOptions: -o completes the last item of its list to option
// names, "name=" for one that takes a value, keeping the items before it,
// with no space after, on every command that takes -o.
func TestCompleteOptions(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		want, nope []string
	}{
		{[]string{"mount", "-o", "endpoint=x,pat"}, []string{"endpoint=x,path_style"}, []string{"path_style", "endpoint=x,pat"}},
		{[]string{"mount", "-o", "endp"}, []string{"endpoint="}, nil},
		{[]string{"mount", "--options", "max_"}, []string{"max_requests=", "max_threads=", "max_concurrency="}, nil},
		{[]string{"mount", "-o", "ro,wa"}, []string{"ro,wal", "ro,wal_lease="}, []string{"ro,wal="}},
		{[]string{"mount", "-o", "non"}, nil, []string{"nonempty"}}, // refused, not offered
		{[]string{"mount", "-o", "_net"}, []string{"_netdev"}, nil},
		{[]string{"mount", "-o", "use_"}, []string{"use_path_request_style", "use_sse="}, nil},
		{[]string{"mount", "-o", "region=eu"}, nil, nil}, // a value: nothing
		{[]string{"ls", "-o", "s3_req"}, []string{"s3_request_timeout="}, nil},
		{[]string{"gc", "-o", "log_f"}, []string{"log_file="}, nil},
		{[]string{"format", "-o", "data_b"}, []string{"data_block_size="}, nil},
	} {
		got, directive := complete(t, tc.args...)
		if directive != ":6" { // NoSpace (2) | NoFileComp (4)
			t.Errorf("%q: directive %s, want :6", tc.args, directive)
		}
		if tc.want == nil && tc.nope == nil && len(got) != 0 {
			t.Errorf("%q: offered %q, want nothing", tc.args, got)
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: %q not offered among %q", tc.args, w, got)
			}
		}
		for _, n := range tc.nope {
			if slices.Contains(got, n) {
				t.Errorf("%q: %q offered", tc.args, n)
			}
		}
		last := tc.args[len(tc.args)-1]
		for _, g := range got {
			if !strings.HasPrefix(g, last) {
				t.Errorf("%q: %q does not extend what was typed", tc.args, g)
			}
		}
	}
}
