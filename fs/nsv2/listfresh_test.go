package nsv2

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// slowStore is a store whose GETs each take 30 ms of c's time.
type slowStore struct {
	staging.Store
	c *fakeClock
}

func (s slowStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.c.sleep(ctx, 30*time.Millisecond)
	return s.Store.Get(ctx, key, r)
}

// A listing's names are fresh for the TTL from the listing's end, those it
// read and those it found cached and unchanged alike: the kernel looks each
// one up right after (READDIRPLUS), and one taken as learned when it was
// read (or confirmed) expired on a listing longer than the TTL and was read
// again, one at a time. Mount a lists a directory of 170 names of its own
// and 170 of mount b's (the store's GETs take 30 ms each of a's clock,
// whose TTL is 1 s): every lookup after it sends nothing. Before, each of
// the 340 lookups sent a GET (a 500-name listing through a mount on the
// general link: 6 s instead of 1.3 s).
func TestListedNamesFreshForLookups(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	c := newFakeClock()
	cs := counting.New(st)
	mk := func(s staging.Store, m int) *Tree {
		tr, err := Open(Config{Store: s, Root: root, Mount: cid(m), FirstBatch: 1<<40 + uint64(m)*16, Clock: c.now, Sleep: c.sleep, TTL: time.Second, RefreshEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	a := mk(slowStore{cs, c}, 1)
	b := mk(st, 2)
	rt := namespace.RootIno
	d := must(b.Mkdir(ctx, rt, "d.tmp", 0o755, owner))(t)
	must(a.Lookup(ctx, rt, "d.tmp"))(t)
	for i := range 170 {
		must(a.Create(ctx, d.Ino, fmt.Sprintf("a%03d", i), 0o644, owner))(t)
		must(b.Create(ctx, d.Ino, fmt.Sprintf("b%03d", i), 0o644, owner))(t)
	}
	c.sleep(ctx, 2*time.Second)
	if _, err := b.Rename(ctx, rt, "d.tmp", rt, "d", 0); err != nil {
		t.Fatal(err)
	}
	s0 := cs.Snapshot()
	dd := must(a.Lookup(ctx, rt, "d"))(t)
	ents, err := a.ReadDirAfter(ctx, dd.Ino, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1 := cs.Snapshot()
	for _, e := range ents {
		must(a.Lookup(ctx, dd.Ino, e.Name))(t)
	}
	s2 := cs.Snapshot()
	if len(ents) != 340 {
		t.Fatalf("listed %d names, want 340", len(ents))
	}
	if d := s2.Sub(s1); d.Total().Requests != 0 {
		t.Fatalf("the lookups after the listing sent %v; the listing %v", d, s1.Sub(s0))
	}
}

// A name read or written is served from the cache for the TTL, then read
// again: what another mount changed meanwhile shows within it. Mount a
// caches f; b renames f away; a still shows f until its TTL has passed,
// then not.
func TestCachedNameExpires(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	c := newFakeClock()
	a, err := Open(Config{Store: st, Root: root, Mount: cid(1), FirstBatch: 1<<40 + 16, Clock: c.now, Sleep: c.sleep, TTL: time.Second, RefreshEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := openTree(t, st, 2)
	rt := namespace.RootIno
	must(a.Create(ctx, rt, "f", 0o644, owner))(t)
	if _, err := b.Rename(ctx, rt, "f", rt, "g", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, rt, "f"); err != nil {
		t.Fatalf("within the TTL, a's lookup of f: %v, want its cached entry", err)
	}
	c.sleep(ctx, time.Second)
	if n, err := a.Lookup(ctx, rt, "f"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("past the TTL, a's lookup of f: %+v, %v; want ErrNotExist", n, err)
	}
}

// A lookup's miss is answered from the directory's whole listing while it
// is younger than the TTL, as v1 answers one from its copy of the log: the
// kernel looks a name up before every create, and that GET was a fifth of
// a create's requests. The first miss lists the directory (one LIST a
// fragment); the misses after it send nothing; a name another mount made
// since shows once the TTL is over, and a name this mount made at once. A
// directory with more names than a page is not listed for a miss.
func TestMissAnsweredFromListing(t *testing.T) {
	ctx := context.Background()
	st := mem.NewS3ETags()
	c := newFakeClock()
	cs := counting.New(st)
	a, err := Open(Config{Store: cs, Root: root, Mount: cid(1), FirstBatch: 1<<40 + 16, Clock: c.now, Sleep: c.sleep, TTL: time.Second, RefreshEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := openTree(t, st, 2)
	rt := namespace.RootIno
	d := must(a.Mkdir(ctx, rt, "d", 0o755, owner))(t)
	must(b.Lookup(ctx, rt, "d"))(t)
	must(b.Create(ctx, d.Ino, "theirs", 0o644, owner))(t)

	s0 := cs.Snapshot()
	for i := range 10 {
		if _, err := a.Lookup(ctx, d.Ino, fmt.Sprintf("new%d", i)); !errors.Is(err, namespace.ErrNotExist) {
			t.Fatalf("lookup of a name no one made: %v", err)
		}
	}
	if got := cs.Snapshot().Sub(s0); got.Total().Requests != 1 || got.Op(staging.OpList).Requests != 1 {
		t.Fatalf("ten misses sent %v, want one LIST", got)
	}
	must(a.Lookup(ctx, d.Ino, "theirs"))(t) // listed: read, not answered absent
	must(a.Create(ctx, d.Ino, "mine", 0o644, owner))(t)
	must(a.Lookup(ctx, d.Ino, "mine"))(t)

	must(b.Create(ctx, d.Ino, "later", 0o644, owner))(t)
	if _, err := a.Lookup(ctx, d.Ino, "later"); !errors.Is(err, namespace.ErrNotExist) {
		t.Fatalf("within the TTL of the listing, another mount's new name: %v, want the listing's ErrNotExist", err)
	}
	c.sleep(ctx, time.Second)
	must(a.Lookup(ctx, d.Ino, "later"))(t)

	// More names than a page: misses read the name.
	big := must(b.Mkdir(ctx, rt, "big", 0o755, owner))(t)
	for i := range missListMax + 1 {
		must(b.Create(ctx, big.Ino, fmt.Sprintf("f%04d", i), 0o644, owner))(t)
	}
	must(a.Lookup(ctx, rt, "big"))(t)
	for range 2 {
		s1 := cs.Snapshot()
		if _, err := a.Lookup(ctx, big.Ino, "none"); !errors.Is(err, namespace.ErrNotExist) {
			t.Fatal(err)
		}
		if got := cs.Snapshot().Sub(s1); got.Op(staging.OpGet).Requests != 1 {
			t.Fatalf("a miss in a directory of %d names sent %v, want its GET", missListMax+1, got)
		}
	}
}
