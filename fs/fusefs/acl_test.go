package fusefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// aclBytes encodes entries (tag, perm, id triples) after a version 2 header.
func aclBytes(version uint32, es ...aclEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, version)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

var (
	eUserObj  = aclEntry{aclUserObj, 6, aclNoID}
	eUser     = aclEntry{aclUser, 4, 65534}
	eGroupObj = aclEntry{aclGroupObj, 4, aclNoID}
	eGroup    = aclEntry{aclGroup, 5, 100}
	eMask     = aclEntry{aclMask, 7, aclNoID}
	eOther    = aclEntry{aclOther, 0, aclNoID}
)

func TestParseACL(t *testing.T) {
	good := [][]aclEntry{
		{eUserObj, eGroupObj, eOther},
		{eUserObj, eUser, eGroupObj, eMask, eOther},
		{eUserObj, eGroupObj, eGroup, eMask, eOther},
		{eUserObj, eGroupObj, eMask, eOther}, // a mask with no named entry
	}
	for _, es := range good {
		a, err := parseACL(aclBytes(aclVersion, es...))
		if err != nil {
			t.Fatalf("parse %v: %v", es, err)
		}
		if !slices.Equal(a, acl(es)) || !bytes.Equal(a.encode(), aclBytes(aclVersion, es...)) {
			t.Fatalf("parse %v: %v, encodes differently", es, a)
		}
	}
	bad := map[string][]byte{
		"empty":              nil,
		"header only":        aclBytes(aclVersion),
		"version 1":          aclBytes(1, eUserObj, eGroupObj, eOther),
		"half an entry":      aclBytes(aclVersion, eUserObj, eGroupObj, eOther)[:23],
		"no other":           aclBytes(aclVersion, eUserObj, eGroupObj),
		"no user_obj":        aclBytes(aclVersion, eGroupObj, eOther),
		"named without mask": aclBytes(aclVersion, eUserObj, eUser, eGroupObj, eOther),
		"out of order":       aclBytes(aclVersion, eGroupObj, eUserObj, eOther),
		"two user_obj":       aclBytes(aclVersion, eUserObj, eUserObj, eGroupObj, eOther),
		"two masks":          aclBytes(aclVersion, eUserObj, eUser, eGroupObj, eMask, eMask, eOther),
		"after other":        aclBytes(aclVersion, eUserObj, eGroupObj, eOther, eOther),
		"perm bits":          aclBytes(aclVersion, aclEntry{aclUserObj, 8, aclNoID}, eGroupObj, eOther),
		"unknown tag":        aclBytes(aclVersion, eUserObj, aclEntry{0x40, 0, aclNoID}, eGroupObj, eOther),
		"named no id":        aclBytes(aclVersion, eUserObj, aclEntry{aclUser, 4, aclNoID}, eGroupObj, eMask, eOther),
		"too many entries":   make([]byte, aclHeaderSize+(aclMaxEntries+1)*aclEntrySize),
	}
	for name, b := range bad {
		if a, err := parseACL(b); !errors.Is(err, errBadACL) {
			t.Errorf("%s: %v, %v; want errBadACL", name, a, err)
		}
	}
}

// TestACLMode: the mode an ACL mirrors, a chmod applied to it, and what a
// node created under a default ACL takes.
func TestACLMode(t *testing.T) {
	named := acl{eUserObj, eUser, eGroupObj, {aclMask, 5, aclNoID}, {aclOther, 1, aclNoID}}
	if m := named.mode(); m != 0o651 {
		t.Fatalf("mode of %v: %o, want 651 (the mask in the group bits)", named, m)
	}
	plain := acl{eUserObj, eGroupObj, eOther}
	if m := plain.mode(); m != 0o640 || !plain.minimal() || named.minimal() {
		t.Fatalf("mode of %v: %o (minimal %v), want 640", plain, m, plain.minimal())
	}
	// chmod 600: the mask is cleared, the named entries and GROUP_OBJ stay.
	c := named.withMode(0o600)
	want := acl{eUserObj, eUser, eGroupObj, {aclMask, 0, aclNoID}, {aclOther, 0, aclNoID}}
	if !slices.Equal(c, want) || c.mode() != 0o600 {
		t.Fatalf("chmod 600 of %v: %v, want %v", named, c, want)
	}
	if c := plain.withMode(0o751); c.mode() != 0o751 {
		t.Fatalf("chmod 751 of %v: %v", plain, c)
	}
	// Created with 0644 under a default ACL granting rwx to all: the mode
	// narrows the entries it mirrors.
	dflt := acl{{aclUserObj, 7, aclNoID}, {aclUser, 7, 65534}, {aclGroupObj, 7, aclNoID}, {aclMask, 7, aclNoID}, {aclOther, 7, aclNoID}}
	got, m := dflt.createMasq(0o644)
	want = acl{{aclUserObj, 6, aclNoID}, {aclUser, 7, 65534}, {aclGroupObj, 7, aclNoID}, {aclMask, 4, aclNoID}, {aclOther, 4, aclNoID}}
	if !slices.Equal(got, want) || m != 0o644 {
		t.Fatalf("created 0644 under %v: %v mode %o, want %v mode 644", dflt, got, m, want)
	}
	// .checkpoints: no write anywhere.
	ro := named.mapPerms(keepR).withMode(0o440)
	for _, e := range ro {
		if e.perm&^4 != 0 {
			t.Fatalf("read-only mirror of %v: %v", named, ro)
		}
	}
}

// TestStoredACLNames: the names ACLs are stored under are namespace names
// (user.*), distinct from the system names and from each other.
func TestStoredACLNames(t *testing.T) {
	for name, stored := range aclStored {
		if got, ok := aclName(stored); !ok || got != name || isACLName(stored) || isStoredACLName(name) {
			t.Fatalf("%s stored as %s: maps back to %q %v", name, stored, got, ok)
		}
		if len(stored) <= len("user.") || stored[:5] != "user." || len(stored) > namespace.MaxNameLen {
			t.Fatalf("stored name %q is not a user attribute name", stored)
		}
	}
}

// FuzzParseACL: whatever is stored, parseACL refuses it or returns an ACL
// that encodes back to the same bytes (up to the ids of unnamed entries),
// parses again to itself, and obeys the kernel's rules.
func FuzzParseACL(f *testing.F) {
	f.Add(aclBytes(aclVersion, eUserObj, eGroupObj, eOther))
	f.Add(aclBytes(aclVersion, eUserObj, eUser, eGroupObj, eGroup, eMask, eOther))
	f.Add(aclBytes(aclVersion, eUserObj, eGroupObj, eMask, eOther))
	f.Add(aclBytes(1, eUserObj, eGroupObj, eOther))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseACL(b)
		if err != nil {
			if !errors.Is(err, errBadACL) {
				t.Fatalf("error %v is not errBadACL", err)
			}
			return
		}
		enc := a.encode()
		if len(enc) != len(b) {
			t.Fatalf("encodes to %d bytes from %d", len(enc), len(b))
		}
		again, err := parseACL(enc)
		if err != nil || !slices.Equal(again, a) {
			t.Fatalf("re-parse: %v, %v; want %v", again, err, a)
		}
		var objs, masks, named int
		for _, e := range a {
			switch e.tag {
			case aclUserObj, aclGroupObj, aclOther:
				objs++
			case aclMask:
				masks++
			case aclUser, aclGroup:
				named++
			}
		}
		if objs != 3 || masks > 1 || (named > 0 && masks != 1) {
			t.Fatalf("parsed %v: %d base entries, %d masks, %d named", a, objs, masks, named)
		}
		// What a chmod makes of it is still valid and mirrors the mode.
		c := a.withMode(0o751)
		if _, err := parseACL(c.encode()); err != nil || c.mode() != 0o751 {
			t.Fatalf("chmod 751 of %v: %v (mode %o), %v", a, c, c.mode(), err)
		}
	})
}
