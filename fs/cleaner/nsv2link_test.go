package cleaner_test

import (
	"context"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A file of two names (a hard link) keeps its data through runs past every
// grace while one name is left, also after that name is renamed; once its
// last name goes, it is reaped as an unlinked file, and its orphan record
// and inode object go with it.
func TestV2LinkedFile(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	tr := v2Volume(t, st)
	n, err := tr.Create(ctx, namespace.RootIno, "a", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	h := writeHistory(t, st, n.FileID, params(segment.FormatStream, false), 5, 3)
	if _, err := tr.Link(ctx, n.Ino, namespace.RootIno, "b"); err != nil {
		t.Fatal(err)
	}
	ikey, err := nsv2.InodeKey("", n.Ino)
	if err != nil {
		t.Fatal(err)
	}
	o := cleaner.Options{Grace: time.Hour, NSLag: time.Minute, TrimGrace: time.Hour}
	run := func(after time.Duration) *cleaner.Report {
		t.Helper()
		o.Now = at(after)
		rep, err := cleaner.CleanVolume(ctx, st, "", o)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	kept := func(when, name string) {
		t.Helper()
		if left := len(keys(t, st, h.prefix)); left == 0 {
			t.Fatalf("%s: the linked file's data was reaped", when)
		}
		h.checkAt(t, st, h.cnos[len(h.cnos)-1])
		got, err := v2Mount(t, st).Lookup(ctx, namespace.RootIno, name)
		if err != nil || got.FileID != n.FileID || got.Nlink != 1 {
			t.Fatalf("%s: lookup %q: %+v, %v", when, name, got, err)
		}
		if !hasKey(t, st, ikey) {
			t.Fatalf("%s: the inode object of a named file went", when)
		}
	}
	if _, err := tr.Unlink(ctx, namespace.RootIno, "a"); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{3 * time.Hour, 6 * time.Hour, 9 * time.Hour} {
		run(after)
	}
	kept("one name of two unlinked", "b")
	if _, err := tr.Rename(ctx, namespace.RootIno, "b", namespace.RootIno, "c", 0); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{12 * time.Hour, 15 * time.Hour} {
		run(after)
	}
	kept("its last name renamed", "c")

	if _, err := tr.Unlink(ctx, namespace.RootIno, "c"); err != nil {
		t.Fatal(err)
	}
	rec := recordKey(t, n.FileID)
	if !hasKey(t, st, rec) {
		t.Fatal("no orphan record after the last name went")
	}
	run(18 * time.Hour) // finds it orphaned
	if len(keys(t, st, h.prefix)) == 0 {
		t.Fatal("reaped within its grace")
	}
	rep := run(21 * time.Hour)
	if left := len(keys(t, st, h.prefix)); left != 0 {
		t.Fatalf("%d objects of the unlinked file left (orphans %v)", left, rep.Orphans)
	}
	if hasKey(t, st, rec) {
		t.Fatal("orphan record left after the file was reaped")
	}
	if hasKey(t, st, ikey) {
		t.Fatal("inode object left after the file of several names was reaped")
	}
}

// An orphan record left by an unlink that did not land (its tombstone
// failed), of a file linked since and then unlinked from that name: the
// record says nothing of the name's change now, and only the other name,
// which binds the file's ino alone, says it is named: the record is stale
// after the grace, and the file is kept.
func TestV2StaleRecordOfLinkedFile(t *testing.T) {
	ctx := context.Background()
	inner := mem.NewS3ETags()
	tr := v2Volume(t, inner)
	n, err := tr.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	h := writeHistory(t, inner, n.FileID, params(segment.FormatStream, false), 2, 5)
	// The record of an unlink of f whose tombstone never landed.
	rec := recordKey(t, n.FileID)
	body, err := nsv2.EncodeOrphan(&nsv2.Orphan{FileID: n.FileID, Ino: n.Ino, Dir: namespace.RootIno, Frags: 1, Name: "f", Change: "0123456789abcdef0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, inner, rec, body)
	if _, err := tr.Link(ctx, n.Ino, namespace.RootIno, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Unlink(ctx, namespace.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{3 * time.Hour, 6 * time.Hour} {
		rep, err := cleaner.CleanVolume(ctx, inner, "", cleaner.Options{Grace: time.Hour, Now: at(after)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Orphans) != 0 || len(keys(t, inner, h.prefix)) == 0 {
			t.Fatalf("after %v: the named file was reaped (%v)", after, rep.Orphans)
		}
	}
	if hasKey(t, inner, rec) {
		t.Fatal("the stale record of a linked file is kept for good: the listing of names could not tell it named")
	}
	h.checkAt(t, inner, h.cnos[len(h.cnos)-1])
}

func putRaw(t *testing.T, st staging.Store, key string, body []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, body, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}
