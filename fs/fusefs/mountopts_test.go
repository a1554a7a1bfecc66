package fusefs

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
)

func TestKernelOptions(t *testing.T) {
	tests := []struct {
		name      string
		opts      string
		direct    bool
		want      []string
		wantFlags uintptr
	}{
		{"defaults", "", true, []string{"default_permissions", "exec", "nosuid", "nodev"}, syscall.MS_NOSUID | syscall.MS_NODEV},
		{"noexec", "noexec", true, []string{"default_permissions", "noexec", "nosuid", "nodev"}, syscall.MS_NOSUID | syscall.MS_NODEV},
		{"suid", "suid", true, []string{"default_permissions", "exec", "suid", "nodev"}, syscall.MS_NOSUID | syscall.MS_NODEV},
		{"ro", "ro", false, []string{"default_permissions", "ro", "exec", "nosuid", "nodev"}, syscall.MS_NOSUID | syscall.MS_NODEV},
		// mount(2) refuses noatime as a FUSE option word: a flag only.
		{"noatime direct", "noatime", true, []string{"default_permissions", "exec", "nosuid", "nodev"}, syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOATIME},
		{"noatime through fusermount3", "noatime", false, []string{"default_permissions", "exec", "nosuid", "nodev", "noatime"}, syscall.MS_NOSUID | syscall.MS_NODEV},
		{"relatime", "noatime,relatime", true, []string{"default_permissions", "exec", "nosuid", "nodev"}, syscall.MS_NOSUID | syscall.MS_NODEV},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse(config.Default(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, flags := kernelOptions(c, tt.direct)
			if !slices.Equal(got, tt.want) || flags != tt.wantFlags {
				t.Fatalf("kernelOptions = %q, %#x; want %q, %#x", got, flags, tt.want, tt.wantFlags)
			}
		})
	}
	// A config that says otherwise without Parse (which refuses dev) is
	// still mounted nodev: device nodes come from the bucket.
	c := config.Default()
	c.NoDev = false
	if got, flags := kernelOptions(c, true); !slices.Contains(got, "nodev") || slices.Contains(got, "dev") || flags&syscall.MS_NODEV == 0 {
		t.Errorf("kernelOptions without NoDev = %q, %#x; want nodev", got, flags)
	}
}

func TestShown(t *testing.T) {
	file := namespace.Node{Kind: namespace.KindFile, Mode: 0o4751, Uid: 10, Gid: 20}
	dir := namespace.Node{Kind: namespace.KindDir, Mode: 0o700, Uid: 10, Gid: 20}
	link := namespace.Node{Kind: namespace.KindSymlink, Mode: 0o777, Uid: 10, Gid: 20}
	type ugm struct{ uid, gid, mode uint32 }
	tests := []struct {
		name            string
		opts            string
		file, dir, link ugm
	}{
		{"nothing set shows the records", "", ugm{10, 20, 0o4751}, ugm{10, 20, 0o700}, ugm{10, 20, 0o777}},
		{"uid and gid", "uid=1000,gid=0", ugm{1000, 0, 0o4751}, ugm{1000, 0, 0o700}, ugm{1000, 0, 0o777}},
		{"umask alone", "umask=027", ugm{10, 20, 0o4750}, ugm{10, 20, 0o700}, ugm{10, 20, 0o777}},
		{"file_mode and dir_mode", "file_mode=0640,dir_mode=0755", ugm{10, 20, 0o640}, ugm{10, 20, 0o755}, ugm{10, 20, 0o777}},
		{"umask after the modes", "file_mode=0666,dir_mode=01777,umask=022", ugm{10, 20, 0o644}, ugm{10, 20, 0o1755}, ugm{10, 20, 0o777}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse(config.Default(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			fsys := &FS{cfg: c}
			for _, k := range []struct {
				in   namespace.Node
				want ugm
			}{{file, tt.file}, {dir, tt.dir}, {link, tt.link}} {
				got := fsys.shown(k.in)
				if (ugm{got.Uid, got.Gid, got.Mode}) != k.want {
					t.Errorf("kind %v: shown %o %d:%d, want %o %d:%d", k.in.Kind, got.Mode, got.Uid, got.Gid, k.want.mode, k.want.uid, k.want.gid)
				}
			}
		})
	}
}

// countingRaw counts the requests that reach the filesystem behind allowRoot.
type countingRaw struct {
	fuse.RawFileSystem
	n int
}

func (c *countingRaw) Lookup(<-chan struct{}, *fuse.InHeader, string, *fuse.EntryOut) fuse.Status {
	c.n++
	return fuse.OK
}

func (c *countingRaw) Read(<-chan struct{}, *fuse.ReadIn, []byte) (fuse.ReadResult, fuse.Status) {
	c.n++
	return nil, fuse.OK
}

func TestAllowRoot(t *testing.T) {
	tests := []struct {
		uid     uint32
		refused bool
	}{{0, false}, {1000, false}, {1001, true}, {65534, true}}
	for _, tt := range tests {
		inner := &countingRaw{RawFileSystem: fuse.NewDefaultRawFileSystem()}
		a := &allowRoot{RawFileSystem: inner, owner: 1000}
		h := &fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: tt.uid}}}
		st := a.Lookup(nil, h, "x", &fuse.EntryOut{})
		if refused := st == fuse.EACCES; refused != tt.refused || (inner.n == 0) != tt.refused {
			t.Errorf("uid %d: lookup %v, reached the filesystem %d times; want refused %v", tt.uid, st, inner.n, tt.refused)
		}
		// A read of a handle open already is never refused (libfuse's rule).
		if _, st := a.Read(nil, &fuse.ReadIn{InHeader: *h}, nil); st != fuse.OK {
			t.Errorf("uid %d: read %v", tt.uid, st)
		}
	}
}

// allowRootPasses are the requests allow_root lets through from anyone, as
// libfuse does: those on handles already open, and the ones that carry no
// caller.
var allowRootPasses = map[string]bool{
	"String": true, "SetDebug": true, "Forget": true, "Init": true, "OnUnmount": true,
	"Read": true, "Write": true, "Writev": true, "Release": true, "Flush": true, "Fsync": true,
	"ReadDir": true, "ReadDirPlus": true, "ReleaseDir": true, "FsyncDir": true,
}

// TestAllowRootEveryRequest: every other request of go-fuse's RawFileSystem
// is refused by allowRoot itself for another user: it is called with no
// filesystem behind, so a request that is passed on panics.
func TestAllowRootEveryRequest(t *testing.T) {
	a := reflect.ValueOf(&allowRoot{owner: 1000})
	rt := reflect.TypeFor[fuse.RawFileSystem]()
	for i := range rt.NumMethod() {
		m := rt.Method(i)
		if allowRootPasses[m.Name] {
			continue
		}
		fn := a.MethodByName(m.Name)
		args := make([]reflect.Value, fn.Type().NumIn())
		for j := range args {
			at := fn.Type().In(j)
			args[j] = reflect.Zero(at)
			if at.Kind() != reflect.Pointer || at.Elem().Kind() != reflect.Struct {
				continue
			}
			v := reflect.New(at.Elem())
			h := v.Elem()
			if at.Elem() != reflect.TypeFor[fuse.InHeader]() {
				h = h.FieldByName("InHeader")
			}
			if h.IsValid() {
				h.Addr().Interface().(*fuse.InHeader).Caller.Uid = 65534
			}
			args[j] = v
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s from another user reached the filesystem", m.Name)
				}
			}()
			out := fn.Call(args)
			if st, ok := out[len(out)-1].Interface().(fuse.Status); !ok || st != fuse.EACCES {
				t.Errorf("%s from another user: %v, want EACCES", m.Name, out[len(out)-1])
			}
		}()
	}
}

// TestFusermountFallback: with only fusermount on PATH (systems that ship
// fuse 2's name), auto_unmount finds it; fusermount3 wins when both are.
func TestFusermountFallback(t *testing.T) {
	dir := t.TempDir()
	fake := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("PATH", dir)
	saved := programDirs
	programDirs = []string{t.TempDir()} // not the machine's own fusermount3
	t.Cleanup(func() { programDirs = saved })
	if _, err := fusermountBinary(); err == nil {
		t.Fatal("found a fusermount in an empty PATH")
	}
	old := fake("fusermount")
	if got, err := fusermountBinary(); err != nil || got != old {
		t.Fatalf("fusermountBinary() = %q, %v; want %q", got, err, old)
	}
	cur := fake("fusermount3")
	if got, err := fusermountBinary(); err != nil || got != cur {
		t.Fatalf("fusermountBinary() = %q, %v; want %q", got, err, cur)
	}
}

// TestProgramWithoutPath: with PATH empty (mount(8) running mount.ckptfs
// from an fstab line at boot) a program is found where distributions put
// it, and one that exists nowhere is an error naming where it looked.
func TestProgramWithoutPath(t *testing.T) {
	t.Setenv("PATH", "")
	bin, err := Program("sh")
	if err != nil {
		t.Fatalf("Program(sh) without PATH: %v", err)
	}
	if !filepath.IsAbs(bin) {
		t.Fatalf("Program(sh) = %q, want an absolute path", bin)
	}
	if _, err := Program("no-such-program-anywhere"); err == nil || !strings.Contains(err.Error(), "/usr/bin") {
		t.Fatalf("Program of a missing program: %v, want an error naming where it looked", err)
	}
}
