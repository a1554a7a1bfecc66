package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging/s3"
)

// TestBadOptionExitsUsage: a bad -o, an unknown name or a store option
// without its value, is a usage error in every command: exit 2, one line on
// stderr naming the command, nothing run (no mount, nothing opened).
func TestBadOptionExitsUsage(t *testing.T) {
	store := "file://" + t.TempDir() // no volume: opening it would exit 1
	cmds := []struct {
		name string
		args []string // after -o X
	}{
		{"mount", []string{store, "/m"}},
		{"format", []string{store}},
		{"ls", []string{store}},
		{"info", []string{store}},
		{"cat", []string{store, "/f"}},
		{"cp", []string{store, "/f", "/g"}},
		{"fsck", []string{store}},
		{"gc", []string{store}},
		{"bench", nil}, // takes no -o at all
	}
	for _, c := range cmds {
		for _, opt := range []string{"bogus=1", "endpoint=", "mount_timeout=1y", "endpont=http://x"} {
			args := append([]string{"ckptfs", c.name, "-o", opt}, c.args...)
			got, code, out, errOut := runStub(args, 0)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ckptfs "+c.name+": ") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, code, out, errOut)
			}
			if got != nil {
				t.Errorf("%q mounted %+v", args, got)
			}
		}
	}
	// A tunable mount takes with a bad value, too.
	for _, args := range [][]string{
		{"ckptfs", "mount", "-o", "data_block_size=3000", store, "/m"},
		{"ckptfs", "format", "-o", "ns_refresh_max=1x", store},
		{"ckptfs", "ls", "-o", "s3_request_timeout=fast", store},
		{"ckptfs", "gc", "-o", "log=loud", store},
	} {
		if _, code, _, errOut := runStub(args, 0); code != exitUsage {
			t.Errorf("%q: exit %d, %q; want 2", args, code, errOut)
		}
	}
}

// TestUnknownOptionSuggestion: the message names every unknown option with
// the nearest known name, store options included, through mount and the
// tools.
func TestUnknownOptionSuggestion(t *testing.T) {
	store := "file://" + t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ckptfs", "mount", "-o", "endpont=http://x", store, "/m"},
			`ckptfs mount: options: unknown option "endpont" (did you mean endpoint?)`},
		{[]string{"ckptfs", "mount", "-o", "s3_request_timeot=5s,wal,flush_intervl=1s", store, "/m"},
			`unknown option "s3_request_timeot" (did you mean s3_request_timeout?); unknown option "flush_intervl" (did you mean flush_interval?)`},
		{[]string{"ckptfs", "format", "-o", "regoin=x", store}, `unknown option "regoin" (did you mean region?)`},
		{[]string{"ckptfs", "ls", "-o", "endpont=http://x", store}, "ckptfs ls: unknown options: endpont=http://x (did you mean endpoint?) (see"},
		{[]string{"ckptfs", "ls", "-o", "endpont=http://x,frob=1,s3_requst_timeout=1s,ns_refresh=1s", store},
			"ckptfs ls: unknown options: endpont=http://x (did you mean endpoint?), frob=1, s3_requst_timeout=1s (did you mean s3_request_timeout?); options for mount only: ns_refresh=1s"},
		{[]string{"ckptfs", "gc", "-o", "lgo=debug", store}, "ckptfs gc: unknown options: lgo=debug (did you mean log?)"},
		{[]string{"ckptfs", "cp", "-o", "path_stlye", store, "/f", "/g"}, "unknown options: path_stlye (did you mean path_style?)"},
	} {
		_, code, _, errOut := runStub(tc.args, 0)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestToolsTakeStoreTunables: every tool takes the options a store needs
// that mount takes (the S3 timeouts, log=, mount_timeout=), and passes
// the timeouts to the store.
func TestToolsTakeStoreTunables(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + dir
	opts := "s3_connect_timeout=5s,s3_request_timeout=1h,s3_stall_timeout=2m,s3_retry_max_time=0.01d,log=debug,mount_timeout=1d"
	local := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(local, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"format", "-o", opts, store},
		{"cp", "-o", opts, "--local", store, local, "/f"},
		{"cp", "-o", opts, store, "/f", "/g"},
		{"ls", "-o", opts, store},
		{"info", "-o", opts, store, "/f"},
		{"cat", "-o", opts, store, "/g"},
		{"fsck", "-o", opts, store},
		{"gc", "-o", opts, "--dry-run", store},
	} {
		got, code, out, errOut := runStub(append([]string{"ckptfs"}, args...), 0)
		if code != 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
		if args[0] == "cat" && out != "hello\n" {
			t.Errorf("cat: %q", out)
		}
		if got != nil {
			t.Errorf("%q mounted", args)
		}
	}
	if got, code, _, errOut := runStub([]string{"ckptfs", "mount", "-o", opts, store, "/m"}, 0); code != 0 || got == nil {
		t.Errorf("mount with %s: exit %d, %q", opts, code, errOut)
	}
	so, _, err := parseToolOpts(strings.Split(opts, ","))
	want := s3.Timeouts{Connect: 5 * time.Second, Request: time.Hour, Stall: 2 * time.Minute, RetryMax: 864 * time.Second}
	if err != nil || so.timeouts != want || so.mountTimeout != 24*time.Hour {
		t.Errorf("parseToolOpts(%s) = %+v, %v; want timeouts %+v", opts, so, err, want)
	}
}

// TestDurationFlags: the duration flags take d and w as -o options do,
// and refuse a bad one as a usage error.
func TestDurationFlags(t *testing.T) {
	c := newGcCmd()
	if err := c.ParseFlags([]string{"--keep-for", "7d", "--grace=2w", "--min-age", "1d12h", "--ns-lag", "90m"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"keep-for": "168h0m0s", "grace": "336h0m0s", "min-age": "36h0m0s", "ns-lag": "1h30m0s"} {
		if got := c.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}
	b := newBenchCmd()
	if err := b.ParseFlags([]string{"--duration=1w"}); err != nil || b.Flags().Lookup("duration").Value.String() != "168h0m0s" {
		t.Errorf("bench --duration=1w: %v", err)
	}
	store := "file://" + t.TempDir()
	for _, args := range [][]string{
		{"ckptfs", "gc", "--grace", "1y", store},
		{"ckptfs", "gc", "--keep-for", "7", store},
		{"ckptfs", "bench", "--duration", "1dd"},
	} {
		_, code, _, errOut := runStub(args, 0)
		if code != exitUsage || !strings.Contains(errOut, "bad duration") {
			t.Errorf("%q: exit %d, %q; want 2 and a bad duration", args, code, errOut)
		}
	}
}

// TestStoreOptionNamesAgree: the store options config suggests are those
// takeStoreOpts takes and the help documents, so that a typo of a new one
// is answered too.
func TestStoreOptionNamesAgree(t *testing.T) {
	known := config.StoreOptionNames()
	for _, name := range known {
		if _, rest, _ := takeStoreOpts([]string{name + "=x"}); len(rest) != 0 {
			t.Errorf("config knows store option %s, which takeStoreOpts does not take", name)
		}
	}
	for _, o := range storeOptDocs {
		name, _, _ := strings.Cut(o.usage, "=")
		if !slices.Contains(known, name) {
			t.Errorf("the help documents store option %s, which config.StoreOptionNames lacks", name)
		}
	}
}
