package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// runStub is run with a mount that records what it was given instead of
// mounting.
func runStub(args []string, code int) (got *mountArgs, exit int, stdout, stderr string) {
	var out, errOut strings.Builder
	stub := func(m mountArgs, _, _ io.Writer) int {
		got = &m
		return code
	}
	exit = execute(newRootCmd(stub, &out, &errOut), helperArgs(args))
	return got, exit, out.String(), errOut.String()
}

// TestCommandHelp: every command's --help (and -h) exits 0, prints to
// stdout, and names the command and each of its flags.
func TestCommandHelp(t *testing.T) {
	cases := []struct {
		cmd   string
		flags []string
	}{
		{"format", []string{"-o, --options", "--keep", "--keep-for"}},
		{"mount", []string{"-o, --options", "-f, --foreground"}},
		{"ls", []string{"-o, --options"}},
		{"info", []string{"-o, --options", "--json"}},
		{"cat", []string{"-o, --options", "--cno", "--offset", "--length"}},
		{"fsck", []string{"-o, --options"}},
		{"gc", []string{"-o, --options", "--keep", "--keep-for", "--grace", "--min-age", "--ns-lag", "-n, --dry-run"}},
		{"tune", []string{"-o, --options", "--keep", "--keep-for"}},
		{"upgrade", []string{"-o, --options", "--parallel"}},
		{"bench", []string{"--table", "--size", "--profile", "--rates", "--hot", "--repeats", "--duration", "--writers"}},
		{"version", nil},
		{"completion", []string{"bash", "zsh", "fish", "powershell"}},
	}
	for _, c := range cases {
		for _, h := range []string{"--help", "-h"} {
			args := []string{"ckptfs", c.cmd, h}
			_, code, out, errOut := runStub(args, 0)
			if code != 0 || errOut != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
				continue
			}
			for _, want := range append([]string{"ckptfs " + c.cmd, "-h, --help"}, c.flags...) {
				if !strings.Contains(out, want) {
					t.Errorf("%q does not name %q:\n%s", args, want, out)
				}
			}
		}
	}
}

// TestHelpText: nothing the hand-written help had is lost; the root's help
// starts with the version and documents the exit statuses, mount's (also
// as mount.ckptfs) keeps the stores, store options and tunables.
func TestHelpText(t *testing.T) {
	common := []string{"s3://bucket", "file:///abs/dir", "endpoint=URL", "single_writer", "memory_limit", "flush_on_close", "mount.ckptfs", "/etc/fstab", "Tunables"}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"ckptfs", "--help"}, append([]string{"Exit status", "2  usage error", "ckptfs gc", "completion", "--version"}, common...)},
		{[]string{"ckptfs", "help"}, append([]string{"Exit status"}, common...)},
		{[]string{"ckptfs", "mount", "--help"}, common},
		{[]string{"/sbin/mount.ckptfs", "--help"}, common},
		{[]string{"ckptfs", "help", "mount"}, common},
		{[]string{"ckptfs", "help", "gc"}, []string{"ckptfs gc [flags] STORE", "--min-age", "-h, --help"}},
	}
	for _, c := range cases {
		_, code, out, errOut := runStub(c.args, 0)
		if code != 0 || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q", c.args, code, errOut)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(out, want) {
				t.Errorf("%q does not mention %q", c.args, want)
			}
		}
	}
	_, _, out, _ := runStub([]string{"ckptfs", "--help"}, 0)
	if !strings.HasPrefix(out, version()+"\n") {
		t.Errorf("--help does not start with the version line: %.80q", out)
	}
}

// TestUsageErrors: a command line that cannot run exits 2 with one line on
// stderr naming the command, and nothing on stdout; a failed operation
// exits 1, also with one line.
func TestUsageErrors(t *testing.T) {
	empty := "file://" + t.TempDir()
	cases := []struct {
		args []string
		code int
		want string // in the line
	}{
		{[]string{"ckptfs", "frob"}, 2, `ckptfs: unknown command "frob"`},
		{[]string{"ckptfs", "mout", "mem://", "/m"}, 2, "did you mean mount?"},
		{[]string{"ckptfs", "--frob"}, 2, "ckptfs: unknown flag: --frob"},
		{[]string{"ckptfs", "ls", "--frob", "mem://"}, 2, "ckptfs ls: unknown flag: --frob"},
		{[]string{"ckptfs", "info", "-json", "mem://"}, 2, "ckptfs info: unknown flag -json (did you mean --json?)"},
		{[]string{"ckptfs", "bench", "-table=buys"}, 2, "did you mean --table?"},
		{[]string{"ckptfs", "ls"}, 2, "ckptfs ls: want STORE [PATH], got 0 arguments"},
		{[]string{"ckptfs", "info", "a", "b", "c"}, 2, "ckptfs info: want STORE [PATH], got 3"},
		{[]string{"ckptfs", "format"}, 2, "ckptfs format: want STORE"},
		{[]string{"ckptfs", "cat", "mem://"}, 2, "ckptfs cat: want STORE and PATH"},
		{[]string{"ckptfs", "cat", "--offset", "-1", "mem://", "/f"}, 2, "--offset -1"},
		{[]string{"ckptfs", "fsck", "a", "b", "c"}, 2, "ckptfs fsck:"},
		{[]string{"ckptfs", "gc"}, 2, "ckptfs gc: want STORE"},
		{[]string{"ckptfs", "gc", "--keep", "x", "mem://"}, 2, "ckptfs gc:"},
		{[]string{"ckptfs", "gc", "--keep", "-1", "mem://"}, 2, "--keep -1"},
		{[]string{"ckptfs", "gc", "--grace", "-1s", "mem://"}, 2, "--grace -1s"},
		{[]string{"ckptfs", "gc", "--ns-lag", "-1s", "mem://"}, 2, "--ns-lag -1s"},
		{[]string{"ckptfs", "gc", "-o", "endpoint=", "mem://"}, 2, "endpoint needs a value"},
		{[]string{"ckptfs", "gc", "-o", "ns_refresh=1s", "mem://"}, 2, "options for mount only: ns_refresh=1s"},
		{[]string{"ckptfs", "ls", "-o", "ns_refresh=1s", empty}, 2, `ckptfs ls: options for mount only: ns_refresh=1s`},
		{[]string{"ckptfs", "bench", "extra"}, 2, `ckptfs bench: unexpected argument "extra"`},
		{[]string{"ckptfs", "bench", "--table", "nope", "--repeats", "0"}, 2, `--table "nope"`},
		{[]string{"ckptfs", "version", "x"}, 2, "ckptfs version:"},
		{[]string{"ckptfs", "help", "frob"}, 2, `ckptfs help: unknown help topic "frob"`},
		{[]string{"ckptfs", "help", "ls", "x"}, 2, `unknown help topic "ls x"`},
		{[]string{"ckptfs", "completion"}, 2, "ckptfs completion: want a shell"},
		{[]string{"ckptfs", "completion", "tcsh"}, 2, `unknown shell "tcsh"`},
		{[]string{"ckptfs", "mount", "mem://"}, 2, "ckptfs mount: want STORE and MOUNTPOINT, got 1 argument (see"},
		// A STORE of none of its forms is a usage error too.
		{[]string{"ckptfs", "fsck", "ftp://x"}, 2, `ckptfs fsck: store "ftp://x": want s3://bucket[/prefix], file:///dir or mem://`},
		{[]string{"ckptfs", "ls", "s3:/bucket"}, 2, `ckptfs ls: store "s3:/bucket": want s3://bucket[/prefix]`},
		{[]string{"ckptfs", "format", "s3://"}, 2, `ckptfs format: store "s3://": want s3://bucket[/prefix]`},
		{[]string{"ckptfs", "info", "file://rel/dir"}, 2, `ckptfs info: store "file://rel/dir": want file:///absolute/dir`},
		{[]string{"ckptfs", "cat", "%zz", "/f"}, 2, `ckptfs cat: store "%zz": invalid URL escape "%zz"`},
		{[]string{"ckptfs", "cp", "bucket/vol", "/a", "/b"}, 2, `ckptfs cp: store "bucket/vol": want s3://bucket[/prefix], file:///dir or mem://`},
		{[]string{"ckptfs", "gc", "/var/lib/vol"}, 2, `ckptfs gc: store "/var/lib/vol": want`},
		{[]string{"ckptfs", "mount", "bucket", "/m"}, 2, `ckptfs mount: store "bucket": want`},
		{[]string{"mount.ckptfs", "s3:bucket", "/m", "-o", "rw"}, 2, `ckptfs mount: store "s3:bucket": want s3://bucket[/prefix]`},
		{[]string{"ckptfs", "mount", "mem://", "/m", "-o"}, 2, "flag needs an argument: 'o'"},
		{[]string{"ckptfs", "mount", "--frobnicate", "mem://", "/m"}, 2, "unknown flag: --frobnicate"},
		{[]string{"mount.ckptfs", "mem://"}, 2, "ckptfs mount: want STORE and MOUNTPOINT"},
		// A device node comes from the bucket: a mount is always nodev.
		{[]string{"ckptfs", "mount", "-o", "dev", "mem://", "/m"}, 2, "option dev: not supported: a ckptfs mount is always nodev"},
		{[]string{"mount.ckptfs", "mem://", "/m", "-o", "rw,dev"}, 2, "option dev: not supported: a ckptfs mount is always nodev"},
		{[]string{"ckptfs", "mount", "-o", "nodev=false", "mem://", "/m"}, 2, "option nodev=false: must be true: a ckptfs mount is always nodev"},
		// The operation fails: 1.
		{[]string{"ckptfs", "ls", empty}, 1, "ckptfs ls: no ckptfs volume at " + empty},
		{[]string{"ckptfs", "gc", empty}, 1, "ckptfs gc: no ckptfs volume"},
	}
	for _, c := range cases {
		got, code, out, errOut := runStub(c.args, 0)
		if code != c.code || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ckptfs") || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.args, code, out, errOut, c.code, c.want)
		}
		if got != nil {
			t.Errorf("%q mounted %+v", c.args, got)
		}
	}
	// No command at all: the usage, on stderr, and 2.
	_, code, out, errOut := runStub([]string{"ckptfs"}, 0)
	if code != 2 || out != "" || !strings.Contains(errOut, "Available Commands") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestMountArgs: mount and mount.ckptfs (as mount(8) runs it: STORE DIR
// [-sfnv] [-o opts], the -o before or after) parse to the same mount; the
// mount's own exit status is the command's, with nothing added.
func TestMountArgs(t *testing.T) {
	cases := []struct {
		args []string
		want mountArgs
	}{
		{[]string{"/sbin/mount.ckptfs", "mem://", "DIR", "-o", "log=debug"}, mountArgs{store: "mem://", mountpoint: "DIR", opts: []string{"log=debug"}}},
		{[]string{"mount.ckptfs", "-o", "log=debug", "file:///srv/vol", "DIR"}, mountArgs{store: "file:///srv/vol", mountpoint: "DIR", opts: []string{"log=debug"}}},
		{[]string{"mount.ckptfs", "s3://b", "/mnt", "-o", "rw,_netdev", "-n"}, mountArgs{store: "s3://b", mountpoint: "/mnt", opts: []string{"rw", "_netdev"}}},
		{[]string{"mount.ckptfs", "s3://b", "/mnt", "-s", "-f", "-n", "-v", "-o", "wal"}, mountArgs{store: "s3://b", mountpoint: "/mnt", opts: []string{"wal"}, foreground: true}},
		{[]string{"mount.ckptfs", "s3://b", "/mnt", "-sfnv"}, mountArgs{store: "s3://b", mountpoint: "/mnt", foreground: true}},
		{[]string{"ckptfs", "mount", "-o", "log=warn,wal", "-f", "s3://b/p", "/mnt"}, mountArgs{store: "s3://b/p", mountpoint: "/mnt", opts: []string{"log=warn", "wal"}, foreground: true}},
		{[]string{"ckptfs", "mount", "-olog=info", "--foreground", "mem://", "/m"}, mountArgs{store: "mem://", mountpoint: "/m", opts: []string{"log=info"}, foreground: true}},
		{[]string{"ckptfs", "mount", "--options", "log=info", "-o", " wal , flush_interval=2s ", "-o=ro", "mem://", "/m"}, mountArgs{store: "mem://", mountpoint: "/m", opts: []string{"log=info", "wal", "flush_interval=2s", "ro"}}},
		{[]string{"ckptfs", "mount", "mem://", "--", "-dir"}, mountArgs{store: "mem://", mountpoint: "-dir"}},
	}
	for _, c := range cases {
		got, code, out, errOut := runStub(c.args, 0)
		if code != 0 || out != "" || errOut != "" {
			t.Errorf("%q: exit %d, %q, %q", c.args, code, out, errOut)
			continue
		}
		if got == nil || !reflect.DeepEqual(*got, c.want) {
			t.Errorf("%q mounted %+v, want %+v", c.args, got, c.want)
		}
	}
	got, code, _, errOut := runStub([]string{"mount.ckptfs", "mem://", "/m"}, 1)
	if got == nil || code != 1 || errOut != "" {
		t.Errorf("a mount that fails: exit %d, stderr %q; want its 1 and nothing added", code, errOut)
	}
}

// TestCompletion: every shell gets a script for ckptfs, and what the
// scripts ask (the hidden __complete) offers the commands, their flags
// and the store schemes.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		_, code, out, errOut := runStub([]string{"ckptfs", "completion", shell}, 0)
		if code != 0 || errOut != "" || !strings.Contains(out, "ckptfs") || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", shell, code, errOut, len(out))
		}
	}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"ckptfs", "__complete", ""}, []string{"format", "mount", "ls", "info", "cat", "fsck", "gc", "bench", "version", "completion"}},
		{[]string{"ckptfs", "__complete", "gc", "--k"}, []string{"--keep", "--keep-for"}},
		{[]string{"ckptfs", "__complete", "mount", ""}, []string{"s3://", "file:///", "mem://"}},
	}
	for _, c := range cases {
		_, code, out, _ := runStub(c.args, 0)
		if code != 0 {
			t.Errorf("%q: exit %d", c.args, code)
		}
		for _, want := range c.want {
			if !strings.Contains(out, "\n"+want+"\t") && !strings.HasPrefix(out, want+"\t") && !strings.Contains(out, "\n"+want+"\n") && !strings.HasPrefix(out, want+"\n") {
				t.Errorf("%q does not offer %q:\n%s", c.args, want, out)
			}
		}
	}
}

// TestBenchArgv: the "Made by" line names the flags given, spelled as they
// are now, whatever form they were given in.
func TestBenchArgv(t *testing.T) {
	c := newBenchCmd()
	if err := c.ParseFlags([]string{"--table=buys", "--size", "64M", "--duration=1s"}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(benchArgv(c), " "), "ckptfs bench --duration 1s --size 64M --table buys"; got != want {
		t.Errorf("benchArgv = %q, want %q", got, want)
	}
}
