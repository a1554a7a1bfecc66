package namespace

import (
	"context"
	"encoding/json"
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
// like symlinks (devices: TestDeviceNodes). Entries and snapshots are in
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
		got, err := other.Lookup(context.Background(), RootIno, name)
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
	if _, err := ns.GetNode(context.Background(), p.Ino); !errors.Is(err, ErrNotExist) {
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

// TestDeviceNodes: character and block devices are nodes with a mode and a
// device number and no data, seen by another namespace of the same root
// (from the log and from a snapshot), linked, renamed and removed like
// FIFOs. Entries that make one, and snapshots while the volume holds one,
// are in envelope version 4 exactly then (builds before devices know 1 to
// 3 and refuse it); a FIFO beside them alone stays in version 3. Numbers
// past Linux's 12-bit major and 20-bit minor are refused.
func TestDeviceNodes(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	ns := openNS(t, store, Options{CompactEvery: 1 << 20})
	if _, err := ns.Mknod(ctx, RootIno, "p", KindFIFO, 0o640, Owner{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Mknod(ctx, RootIno, "c", KindCharDev, 0o644, Owner{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Mknod of a device: %v, want ErrInvalid", err)
	}
	if _, err := ns.MknodDevice(ctx, RootIno, "f", KindFIFO, 0o644, 1, 2, Owner{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("MknodDevice of a FIFO: %v, want ErrInvalid", err)
	}
	for _, mm := range [][2]uint32{{MaxMajor + 1, 0}, {0, MaxMinor + 1}, {1 << 31, 1 << 31}} {
		if _, err := ns.MknodDevice(ctx, RootIno, "big", KindCharDev, 0o644, mm[0], mm[1], Owner{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("device %d:%d: %v, want ErrInvalid", mm[0], mm[1], err)
		}
	}
	null, err := ns.MknodDevice(ctx, RootIno, "null", KindCharDev, 0o666, 1, 3, Owner{Uid: 7, Gid: 8})
	if err != nil {
		t.Fatal(err)
	}
	if null.Kind != KindCharDev || null.Major != 1 || null.Minor != 3 || null.Mode != 0o666 || null.Uid != 7 || null.Nlink != 1 || null.FileID != "" {
		t.Errorf("character device: %+v", null)
	}
	disk, err := ns.MknodDevice(ctx, RootIno, "disk", KindBlockDev, 0o660, MaxMajor, MaxMinor, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Link(ctx, null.Ino, RootIno, "null2"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Rename(ctx, RootIno, "disk", RootIno, "disk2", 0); err != nil {
		t.Fatal(err)
	}
	check := func(what string, other *Namespace) {
		t.Helper()
		for name, want := range map[string]Node{"null": null, "null2": null, "disk2": disk} {
			got, err := other.Lookup(context.Background(), RootIno, name)
			if err != nil {
				t.Fatalf("%s: %s: %v", what, name, err)
			}
			if got.Ino != want.Ino || got.Kind != want.Kind || got.Mode != want.Mode || got.Major != want.Major || got.Minor != want.Minor {
				t.Errorf("%s: %s = %+v, want %+v", what, name, got, want)
			}
		}
	}
	check("from the log", openNS(t, store, Options{}))
	for k, v := range objectVersions(t, store) {
		e, err := decodeEntry(k, 0, get(t, store, k))
		if err != nil {
			t.Fatal(err)
		}
		want := byte(envVersion)
		switch {
		case e.mknodsDevice():
			want = envVersionDevs
		case e.mknods():
			want = envVersionNodes
		}
		if v != want {
			t.Errorf("%s: version %d, want %d (%+v)", k, v, want, e.ops())
		}
	}
	if err := ns.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	snaps := 0
	for k, v := range objectVersions(t, store) {
		if strings.Contains(k, snapDir) {
			snaps++
			if v != envVersionDevs {
				t.Errorf("%s: snapshot in version %d while the volume holds devices, want %d", k, v, envVersionDevs)
			}
		}
	}
	if snaps == 0 {
		t.Fatal("no snapshot")
	}
	check("from a snapshot", openNS(t, store, Options{}))

	// With the devices gone and the FIFO left, the next snapshot is
	// version 3 again.
	for _, name := range []string{"null", "null2", "disk2"} {
		if _, err := ns.Unlink(ctx, RootIno, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ns.GetNode(context.Background(), null.Ino); !errors.Is(err, ErrNotExist) {
		t.Errorf("device after its last name went: %v, want ErrNotExist", err)
	}
	ns.mu.RLock()
	v := encodeSnapshot(ns.st)[4]
	ns.mu.RUnlock()
	if v != envVersionNodes {
		t.Errorf("snapshot with a FIFO and no device in version %d, want %d", v, envVersionNodes)
	}
}

// TestDeviceVersionRefused: a device in an object of a version below 4 (as
// a build before devices would have read it), version 4 without one, a
// device number past Linux's bounds or on a node that is no device, are
// corrupt.
func TestDeviceVersionRefused(t *testing.T) {
	st := fuzzState(t)
	o := op{Kind: opMknod, Parent: 1, Name: "c", Type: KindCharDev, Mode: 0o644, Major: 1, Minor: 3}
	e := &entry{Seq: st.seq + 1, ID: NewFileID(), Time: 9, Op: &o}
	enc := encodeEntry(e)
	if enc[4] != envVersionDevs {
		t.Fatalf("entry in version %d", enc[4])
	}
	if _, err := decodeEntry("k", 0, enc); err != nil {
		t.Fatal(err)
	}
	for _, v := range []byte{envVersion, envVersionNodes} {
		if _, err := decodeEntry("k", 0, seal(kindEntry, v, enc[envHeaderLen:])); !errors.Is(err, ErrCorrupt) {
			t.Errorf("device mknod in a version %d entry: %v, want ErrCorrupt", v, err)
		}
	}
	fifo := op{Kind: opMknod, Parent: 1, Name: "p", Type: KindFIFO, Mode: 0o644}
	fe := encodeEntry(&entry{Seq: st.seq + 1, ID: NewFileID(), Time: 9, Op: &fifo})
	if _, err := decodeEntry("k", 0, seal(kindEntry, envVersionDevs, fe[envHeaderLen:])); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 4 entry without a device: %v, want ErrCorrupt", err)
	}
	bad := func(o op) []byte {
		body, err := json.Marshal(&entry{Seq: 6, ID: NewFileID(), Time: 9, Op: &o})
		if err != nil {
			t.Fatal(err)
		}
		return seal(kindEntry, envVersionDevs, body)
	}
	for _, b := range []op{
		{Kind: opMknod, Parent: 1, Name: "c", Type: KindCharDev, Major: MaxMajor + 1},
		{Kind: opMknod, Parent: 1, Name: "c", Type: KindBlockDev, Minor: MaxMinor + 1},
		{Kind: opMknod, Parent: 1, Name: "c", Type: KindBlockDev, Major: 1 << 31},
	} {
		if _, err := decodeEntry("k", 0, bad(b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("device %d:%d: %v, want ErrCorrupt", b.Major, b.Minor, err)
		}
	}
	// A device number on another op or node kind.
	body, _ := json.Marshal(&entry{Seq: 6, ID: NewFileID(), Time: 9, Ops: []op{o,
		{Kind: opMknod, Parent: 1, Name: "p", Type: KindFIFO, Major: 1}}})
	if _, err := decodeEntry("k", 0, seal(kindEntry, envVersionDevs, body)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a FIFO with a device number: %v, want ErrCorrupt", err)
	}
	body, _ = json.Marshal(&entry{Seq: 6, ID: NewFileID(), Time: 9, Ops: []op{o,
		{Kind: opMkdir, Parent: 1, Name: "d", Minor: 1}}})
	if _, err := decodeEntry("k", 0, seal(kindEntry, envVersionDevs, body)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a mkdir with a device number: %v, want ErrCorrupt", err)
	}

	// Snapshots.
	if err := st.apply(e, false); err != nil {
		t.Fatal(err)
	}
	data := encodeSnapshot(st)
	if data[4] != envVersionDevs {
		t.Fatalf("snapshot in version %d", data[4])
	}
	got, err := decodeSnapshot("k", 0, data)
	if err != nil {
		t.Fatal(err)
	}
	if n := got.nodes[inoOf(st.seq, 0)]; n == nil || n.kind != KindCharDev || n.major != 1 || n.minor != 3 {
		t.Errorf("device from the snapshot: %+v", n)
	}
	for _, v := range []byte{envVersion, envVersionNodes} {
		if _, err := decodeSnapshot("k", 0, seal(kindSnapshot, v, data[envHeaderLen:])); !errors.Is(err, ErrCorrupt) {
			t.Errorf("device in a version %d snapshot: %v, want ErrCorrupt", v, err)
		}
	}
	plain := encodeSnapshot(fuzzState(t))
	if _, err := decodeSnapshot("k", 0, seal(kindSnapshot, envVersionDevs, plain[envHeaderLen:])); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 4 snapshot without a device: %v, want ErrCorrupt", err)
	}
	rec := st.record()
	for i := range rec.Nodes {
		if rec.Nodes[i].Kind == KindCharDev {
			rec.Nodes[i].Minor = MaxMinor + 1
		}
	}
	body, _ = json.Marshal(rec)
	if _, err := decodeSnapshot("k", 0, seal(kindSnapshot, envVersionDevs, body)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("device minor past the bound in a snapshot: %v, want ErrCorrupt", err)
	}
	rec = st.record()
	rec.Nodes[0].Major = 1 // the root directory
	body, _ = json.Marshal(rec)
	if _, err := decodeSnapshot("k", 0, seal(kindSnapshot, envVersionDevs, body)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a directory with a device number in a snapshot: %v, want ErrCorrupt", err)
	}
}
