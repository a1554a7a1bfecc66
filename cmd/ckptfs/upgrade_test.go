package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/upgrade"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
)

// TestUpgradeCommand: ckptfs upgrade turns a v1 volume into a v2 one whose
// names ls lists and whose file cat reads back as written; a v1 namespace
// open meanwhile fails its next change naming the upgrade; run again it is
// refused, "already namespace v2", exit 1; an unknown option and a mount's
// option are usage errors (exit 2) and change nothing; a hard link is
// carried and its count printed; a file without a name is refused naming
// ckptfs gc.
func TestUpgradeCommand(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := "file://" + root
	ckptfs := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(append([]string{"ckptfs"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := ckptfs("format", store); code != 0 {
		t.Fatalf("format: exit %d, %q, %q", code, out, errOut)
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	d, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns.Create(ctx, d.Ino, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Symlink(ctx, namespace.RootIno, "s", "d/f", namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	ef, err := engine.Create(ctx, st, volume.FilePrefix("", n.FileID), engine.Options{Params: engine.DefaultParams(), FileID: n.FileID})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("v1"), 3000)
	if _, err := ef.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ef.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ef.Close()

	before, err := staging.ListAll(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"upgrade", "-o", "bogus=1", store},
		{"upgrade", "-o", "ro", store},
		{"upgrade", "--parallel", "0", store},
	} {
		if code, _, errOut := ckptfs(args...); code != 2 || !strings.Contains(errOut, "ckptfs upgrade: ") {
			t.Fatalf("%q: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
	if after, _ := staging.ListAll(ctx, st, ""); len(after) != len(before) {
		t.Fatalf("refused upgrades wrote: %d objects, were %d", len(after), len(before))
	}

	code, out, errOut := ckptfs("upgrade", store)
	if code != 0 || !strings.Contains(out, "upgraded "+store+" to namespace v2: 3 names (1 directories, 1 files, 1 symlinks, 0 others)") {
		t.Fatalf("upgrade: exit %d, %q, %q", code, out, errOut)
	}
	if desc, err := volume.ReadDescriptor(ctx, st, ""); err != nil || desc.NamespaceVersion() != config.NamespaceV2 {
		t.Fatalf("descriptor after the upgrade: %+v, %v", desc, err)
	}
	if _, err := ns.Create(ctx, d.Ino, "g", 0o644, namespace.Owner{}); !errors.Is(err, namespace.ErrFenced) || !strings.Contains(err.Error(), "ckptfs upgrade") {
		t.Fatalf("the v1 namespace's change after the upgrade: %v", err)
	}
	if code, out, errOut := ckptfs("ls", store, "/d"); code != 0 || !strings.HasSuffix(strings.TrimSpace(out), " f") {
		t.Fatalf("ls /d: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := ckptfs("cat", store, "/d/f"); code != 0 || out != string(data) {
		t.Fatalf("cat /d/f: exit %d, %d bytes, %q", code, len(out), errOut)
	}
	if code, _, errOut := ckptfs("upgrade", store); code != 1 || !strings.Contains(errOut, "already namespace v2") {
		t.Fatalf("upgrade again: exit %d, %q", code, errOut)
	}

	// A hard link: carried, its names listed; a file without a name:
	// refused, naming ckptfs gc, nothing written.
	v1 := func() (string, *namespace.Namespace) {
		t.Helper()
		r := t.TempDir()
		if code, _, errOut := ckptfs("format", "file://"+r); code != 0 {
			t.Fatal(errOut)
		}
		st, err := dir.New(r)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := namespace.Open(ctx, st, "", namespace.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		if _, err := ns.Create(ctx, namespace.RootIno, "a", 0o644, namespace.Owner{}); err != nil {
			t.Fatal(err)
		}
		return "file://" + r, ns
	}
	linked, ns2 := v1()
	a, err := ns2.Lookup(ctx, namespace.RootIno, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns2.Link(ctx, a.Ino, namespace.RootIno, "b"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = ckptfs("upgrade", linked)
	if code != 0 || !strings.Contains(out, "2 names (0 directories, 2 files, 0 symlinks, 0 others), 1 file of several names (hard links);") {
		t.Fatalf("upgrade of a hard link: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := ckptfs("ls", linked, "/"); code != 0 || !strings.Contains(out, " a\n") || !strings.HasSuffix(out, " b\n") {
		t.Fatalf("ls / after the upgrade of a hard link: exit %d, %q, %q", code, out, errOut)
	}
	orphan, ns3 := v1()
	if _, err := ns3.Unlink(ctx, namespace.RootIno, "a"); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = ckptfs("upgrade", orphan)
	if code != 1 || !strings.Contains(errOut, "1 files without a name left") || !strings.Contains(errOut, "ckptfs gc") || !strings.Contains(errOut, "nothing changed") {
		t.Fatalf("upgrade of a file without a name: exit %d, %q", code, errOut)
	}
	if _, err := ns3.Create(ctx, namespace.RootIno, "c", 0o644, namespace.Owner{}); err != nil {
		t.Fatalf("v1 after a refused upgrade: %v", err)
	}
}

// TestUpgradeResumed: a volume whose upgrade stopped after its fence (a
// crash) is refused by the v1 tools, naming ckptfs upgrade, and upgrade
// run again finishes it and says so.
func TestUpgradeResumed(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := "file://" + root
	ckptfs := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(append([]string{"ckptfs"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := ckptfs("format", store); code != 0 {
		t.Fatal(errOut)
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Mkdir(ctx, namespace.RootIno, "d", 0o755, namespace.Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	ns.Close()
	if code, _, errOut := ckptfs("ls", store, "/"); code != 1 || !strings.Contains(errOut, `run "ckptfs upgrade STORE" again`) {
		t.Fatalf("ls of a fenced v1 volume: exit %d, %q", code, errOut)
	}
	code, out, errOut := ckptfs("upgrade", store)
	if code != 0 || !strings.Contains(out, "an interrupted upgrade finished") || !strings.Contains(out, "1 names") {
		t.Fatalf("upgrade of a fenced volume: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := ckptfs("ls", store, "/"); code != 0 || !strings.HasSuffix(strings.TrimSpace(out), " d") {
		t.Fatalf("ls after the upgrade: exit %d, %q, %q", code, out, errOut)
	}
}

// TestUpgradeReadOnlyStore: a store that refuses writes (read-only
// credentials) is refused before anything is written, saying why.
func TestUpgradeReadOnlyStore(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var out, errOut strings.Builder
	if code := run([]string{"ckptfs", "format", "file://" + root}, &out, &errOut); code != 0 {
		t.Fatal(errOut.String())
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	d, err := volume.ReadDescriptor(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := &writeRecorder{Store: st}
	err = upgradeStore(ctx, ctx, rec, "", d, "file://"+root, upgrade.Parallel, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "access denied") || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("upgrade of a read-only store: %v", err)
	}
	if w := rec.recorded(); len(w) != 1 || !strings.HasPrefix(w[0], "put probe/") {
		t.Fatalf("requests refused: %q; want the one probe", w)
	}
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatalf("v1 open after the refusal: %v", err)
	}
	ns.Close()
}

// cancelAfterPuts cancels the upgrade's context once n writes of names
// have landed, as Ctrl-C in the middle of an upgrade does.
type cancelAfterPuts struct {
	staging.Store
	mu     sync.Mutex
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfterPuts) Put(ctx context.Context, key string, body []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	info, err := c.Store.Put(ctx, key, body, o)
	if strings.Contains(key, "ns2/d/") {
		c.mu.Lock()
		if c.n--; c.n == 0 {
			c.cancel()
		}
		c.mu.Unlock()
	}
	return info, err
}

// TestUpgradeInterrupted: an upgrade whose context ends part way (Ctrl-C)
// stops, says it was interrupted and what to run, and a rerun finishes it
// with every name. Before, it ran on a context nothing could end.
func TestUpgradeInterrupted(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := "file://" + root
	var out, errOut strings.Builder
	if code := run([]string{"ckptfs", "format", store}, &out, &errOut); code != 0 {
		t.Fatal(errOut.String())
	}
	st, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := namespace.Open(ctx, st, "", namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const names = 200
	for i := range names {
		if _, err := ns.Mkdir(ctx, namespace.RootIno, fmt.Sprintf("d%03d", i), 0o755, namespace.Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	ns.Close()
	d, err := volume.ReadDescriptor(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs := &cancelAfterPuts{Store: st, n: 10, cancel: cancel}
	err = upgradeStore(ctx, uctx, cs, "", d, store, 4, io.Discard, io.Discard)
	var ue *userError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), "ckptfs upgrade again") {
		t.Fatalf("an interrupted upgrade: %v; want it to say so and what to run", err)
	}
	keys, err := staging.ListAll(ctx, st, "ns2/d/")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(keys); got >= names {
		t.Fatalf("the interrupted upgrade wrote %d names of %d: it did not stop", got, names)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"ckptfs", "upgrade", store}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "an interrupted upgrade finished") || !strings.Contains(out.String(), fmt.Sprintf("%d names", names)) {
		t.Fatalf("upgrade run again: exit %d, %q, %q", code, out.String(), errOut.String())
	}
}
