package namespace

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// objectVersions returns the envelope version of every log entry and
// snapshot under testRoot, by key.
func objectVersions(t *testing.T, s staging.Store) map[string]byte {
	t.Helper()
	infos, err := staging.ListAll(context.Background(), s, prefix(testRoot)+nsDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]byte{}
	for _, in := range infos {
		out[in.Key] = get(t, s, in.Key)[4]
	}
	return out
}

// TestSpecialNodes: FIFOs and sockets are nodes with a mode and no data,
// seen by another namespace of the same root, renamed, linked and removed
// like symlinks; device kinds are refused. Entries and snapshots are in
// envelope version 3 exactly while they hold one: a volume without them
// stays readable by builds before them, and one with them is refused by
// those builds (they know versions 1 and 2 only).
func TestSpecialNodes(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	ns := openNS(t, store, Options{CompactEvery: 4})
	if _, err := ns.Mkdir(ctx, RootIno, "d", 0o755, Owner{}); err != nil {
		t.Fatal(err)
	}
	for k, v := range objectVersions(t, store) {
		if v != envVersion {
			t.Errorf("%s: version %d before any FIFO, want %d", k, v, envVersion)
		}
	}
	if _, err := ns.Mknod(ctx, RootIno, "c", KindFile, 0o644, Owner{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("mknod of a file: %v, want ErrInvalid", err)
	}
	p, err := ns.Mknod(ctx, RootIno, "p", KindFIFO, 0o640, Owner{Uid: 7, Gid: 8})
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindFIFO || p.Mode != 0o640 || p.Uid != 7 || p.Gid != 8 || p.Nlink != 1 || p.FileID != "" {
		t.Errorf("fifo: %+v", p)
	}
	sk, err := ns.Mknod(ctx, RootIno, "s", KindSocket, 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Mknod(ctx, RootIno, "p", KindSocket, 0o755, Owner{}); !errors.Is(err, ErrExist) {
		t.Errorf("mknod over a name: %v, want ErrExist", err)
	}
	if _, err := ns.Link(ctx, p.Ino, RootIno, "p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Rename(ctx, RootIno, "s", RootIno, "s2", 0); err != nil {
		t.Fatal(err)
	}
	if err := ns.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	other := openNS(t, store, Options{})
	for name, want := range map[string]Node{"p": p, "p2": p, "s2": sk} {
		got, err := other.Lookup(RootIno, name)
		if err != nil {
			t.Fatalf("another namespace: %s: %v", name, err)
		}
		if got.Ino != want.Ino || got.Kind != want.Kind || got.Mode != want.Mode || got.Uid != want.Uid {
			t.Errorf("another namespace: %s = %+v, want %+v", name, got, want)
		}
	}
	vs := objectVersions(t, store)
	snaps3 := 0
	for k, v := range vs {
		isMknod := false
		if strings.Contains(k, logDir) {
			e, err := decodeEntry(k, 0, get(t, store, k))
			if err != nil {
				t.Fatal(err)
			}
			isMknod = e.mknods()
		} else if v == envVersionNodes {
			snaps3++
		}
		if isMknod && v != envVersionNodes || strings.Contains(k, logDir) && !isMknod && v == envVersionNodes {
			t.Errorf("%s: version %d (mknod: %v)", k, v, isMknod)
		}
	}
	if snaps3 == 0 {
		t.Errorf("no snapshot in version 3 while the volume holds a FIFO: %v", vs)
	}
	// Removing them makes the next snapshot version 1 again.
	for _, name := range []string{"p", "p2", "s2"} {
		if _, err := ns.Unlink(ctx, RootIno, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ns.GetNode(p.Ino); !errors.Is(err, ErrNotExist) {
		t.Errorf("fifo after its last name went: %v, want ErrNotExist", err)
	}
	if err := ns.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	ns.mu.RLock()
	special, v := ns.st.holdsSpecial(), encodeSnapshot(ns.st)[4]
	ns.mu.RUnlock()
	if special || v != envVersion {
		t.Errorf("after the FIFO and socket went: special nodes %v, snapshot in version %d, want none and %d", special, v, envVersion)
	}
}

// TestSpecialVersionRefused: a snapshot with a FIFO sealed as version 1 (as
// a build before FIFOs would read it), and version 3 without one, are
// corrupt.
func TestSpecialVersionRefused(t *testing.T) {
	st := fuzzState(t)
	o := op{Kind: opMknod, Parent: 1, Name: "p", Type: KindFIFO, Mode: 0o644}
	if err := st.apply(&entry{Seq: st.seq + 1, ID: NewFileID(), Time: 9, Op: &o}, false); err != nil {
		t.Fatal(err)
	}
	data := encodeSnapshot(st)
	if data[4] != envVersionNodes {
		t.Fatalf("version %d", data[4])
	}
	if _, err := decodeSnapshot("k", 0, data); err != nil {
		t.Fatal(err)
	}
	old := seal(kindSnapshot, envVersion, data[envHeaderLen:])
	if _, err := decodeSnapshot("k", 0, old); !errors.Is(err, ErrCorrupt) {
		t.Errorf("FIFO in a version 1 snapshot: %v, want ErrCorrupt", err)
	}
	plain := encodeSnapshot(fuzzState(t))
	if _, err := decodeSnapshot("k", 0, seal(kindSnapshot, envVersionNodes, plain[envHeaderLen:])); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 3 snapshot without a FIFO: %v, want ErrCorrupt", err)
	}
	bad := op{Kind: opMknod, Parent: 1, Name: "q", Type: KindDir, Mode: 0o644}
	if err := st.apply(&entry{Seq: st.seq + 1, ID: NewFileID(), Time: 9, Op: &bad}, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("mknod of a directory applied: %v", err)
	}
}
