package namespace

import (
	"reflect"
	"testing"
)

// FuzzDecodeEntry: decoding never panics; what decodes re-encodes to the
// same entry; applying it to a state never panics and a failed apply leaves
// the state as it was.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(&entry{Seq: 1, ID: NewFileID(), Time: 1, Op: &op{Kind: opMkdir, Parent: 1, Name: "d", Mode: 0o755}}))
	f.Add([]byte("CKNS\x01\x01\x00\x00"))
	// Several ops, the later ones on the nodes of the earlier (the fuzz
	// state is at seq 5, so the entry is 6 and its first node 6<<16).
	f.Add(encodeEntry(newEntry(6, NewFileID(), 2, []op{
		{Kind: opMkdir, Parent: 1, Name: "x", Mode: 0o755},
		{Kind: opCreate, Parent: 6 << 16, Name: "y", Mode: 0o644, FileID: NewFileID()},
		{Kind: opRename, Parent: 65536, Name: "f", NewParent: 6 << 16, NewName: "f2"},
		{Kind: opSetXattr, Ino: 6<<16 | 1, Name: "user.a", Value: []byte("v")},
		{Kind: opUnlink, Parent: 6 << 16, Name: "y"},
	})))
	f.Add(encodeEntry(newEntry(6, NewFileID(), 2, []op{
		{Kind: opMkdir, Parent: 1, Name: "x", Mode: 0o755},
		{Kind: opMkdir, Parent: 1, Name: "x", Mode: 0o755}, // the second does not apply
	})))
	// A FIFO (envelope version 3), linked and unlinked.
	f.Add(encodeEntry(newEntry(6, NewFileID(), 2, []op{
		{Kind: opMknod, Parent: 1, Name: "p", Type: KindFIFO, Mode: 0o644},
		{Kind: opLink, Ino: 6 << 16, Parent: 65536, Name: "p2"},
		{Kind: opUnlink, Parent: 1, Name: "p"},
	})))
	// Devices (envelope version 4): one at the largest number, one renamed.
	f.Add(encodeEntry(newEntry(6, NewFileID(), 2, []op{
		{Kind: opMknod, Parent: 1, Name: "null", Type: KindCharDev, Mode: 0o666, Major: 1, Minor: 3},
		{Kind: opMknod, Parent: 65536, Name: "disk", Type: KindBlockDev, Mode: 0o660, Major: MaxMajor, Minor: MaxMinor},
		{Kind: opRename, Parent: 65536, Name: "disk", NewParent: 1, NewName: "disk2"},
	})))
	f.Add(encodeEntry(&entry{Seq: 6, ID: NewFileID(), Time: 2,
		Op: &op{Kind: opMknod, Parent: 1, Name: "c", Type: KindCharDev, Mode: 0o600, Minor: 1}}))
	// The fence (envelope version 5), which no state applies.
	f.Add(encodeFence(6, NewFileID(), 3))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decodeEntry("fuzz", 0, data)
		if err != nil {
			return
		}
		again, err := decodeEntry("fuzz", e.Seq, encodeEntry(e))
		if err != nil {
			t.Fatalf("re-encoded entry refused: %v", err)
		}
		if !reflect.DeepEqual(e, again) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, e)
		}
		st := fuzzState(t)
		e.Seq = st.seq + 1
		before := string(encodeSnapshot(st))
		if err := st.apply(e, true); err != nil {
			if err := st.apply(e, false); err == nil {
				t.Fatal("apply accepted what its dry run refused")
			}
			if string(encodeSnapshot(st)) != before {
				t.Fatal("a refused entry changed the state")
			}
			return
		}
		if err := st.apply(e, false); err != nil {
			t.Fatalf("apply refused what its dry run accepted: %v", err)
		}
		if _, err := stateFromRecord(st.record()); err != nil {
			t.Fatalf("applied entry broke an invariant: %v", err)
		}
	})
}

// fuzzState is a small state for entries to apply to: / with d/ (65536),
// d/f (131072), s -> f (196608) and the orphan o (262144).
func fuzzState(t testing.TB) *state {
	st := newState()
	id := func(c byte) string {
		b := make([]byte, 32)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	ops := []op{
		{Kind: opMkdir, Parent: 1, Name: "d", Mode: 0o755},
		{Kind: opCreate, Parent: 65536, Name: "f", Mode: 0o644, FileID: id('a')},
		{Kind: opSymlink, Parent: 1, Name: "s", Target: "d/f"},
		{Kind: opCreate, Parent: 1, Name: "o", Mode: 0o644, FileID: id('b')},
		{Kind: opUnlink, Parent: 1, Name: "o"},
	}
	for i, o := range ops {
		if err := st.apply(&entry{Seq: uint64(i + 1), ID: id('c'), Time: int64(i), Op: &o}, false); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// FuzzDecodeSnapshot: decoding never panics; what decodes keeps every
// invariant and re-encodes to the same state.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(newState()))
	withDevices := fuzzState(f)
	for i, o := range []op{
		{Kind: opMknod, Parent: 1, Name: "p", Type: KindFIFO, Mode: 0o644},
		{Kind: opMknod, Parent: 65536, Name: "c", Type: KindCharDev, Mode: 0o666, Major: 1, Minor: 3},
		{Kind: opMknod, Parent: 1, Name: "b", Type: KindBlockDev, Mode: 0o660, Major: MaxMajor, Minor: MaxMinor},
	} {
		if err := withDevices.apply(&entry{Seq: withDevices.seq + 1, ID: NewFileID(), Time: int64(i), Op: &o}, false); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(encodeSnapshot(withDevices))
	f.Add([]byte("CKNS\x01\x02\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeSnapshot("fuzz", 0, data)
		if err != nil {
			return
		}
		enc := encodeSnapshot(st)
		again, err := decodeSnapshot("fuzz", st.seq, enc)
		if err != nil {
			t.Fatalf("re-encoded snapshot refused: %v", err)
		}
		if !reflect.DeepEqual(st.record(), again.record()) {
			t.Fatal("snapshot round trip changed the state")
		}
		for ino, n := range st.nodes {
			if n.kind == KindDir && !st.isUnder(ino, RootIno) {
				t.Fatalf("directory %d not under the root", ino)
			}
		}
		_ = st.orphans()
	})
}
