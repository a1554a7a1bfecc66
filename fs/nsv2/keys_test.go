package nsv2

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

const (
	idA = "0123456789abcdef0123456789abcdef"
	idB = "fedcba9876543210fedcba9876543210"
)

func TestEscapeName(t *testing.T) {
	for _, c := range []struct{ name, seg string }{
		{"a", "a"},
		{"step_1.tmp", "step_1.tmp"},
		{"a b~", "a b~"},
		{"50%", "50%25"},
		{"a/b", "a%2Fb"},
		{"\x01\x7f\x80\xff", "%01%7F%80%FF"},
		{"é", "%C3%A9"},
		{"%2F", "%252F"},
	} {
		if got := EscapeName(c.name); got != c.seg {
			t.Errorf("EscapeName(%q) = %q, want %q", c.name, got, c.seg)
		}
		if got, err := UnescapeName(c.seg); err != nil || got != c.name {
			t.Errorf("UnescapeName(%q) = %q, %v; want %q", c.seg, got, err, c.name)
		}
	}
	// Every segment the escaper would not write is refused.
	for _, seg := range []string{"%41", "%2f", "%2", "%", "a%G0", "%e9", "a/b", "\x7f", "\xc3\xa9", "a\x00"} {
		if got, err := UnescapeName(seg); err == nil {
			t.Errorf("UnescapeName(%q) = %q, want an error", seg, got)
		}
	}
	// Every byte escapes to a segment that reads back to it.
	for c := 0; c < 256; c++ {
		name := "x" + string([]byte{byte(c)})
		if got, err := UnescapeName(EscapeName(name)); err != nil || got != name {
			t.Errorf("byte %#02x: %q, %v", c, got, err)
		}
	}
}

func TestDentryKey(t *testing.T) {
	name := "shard_0007.pt"
	key, err := DentryKey("vol/a", 0x10000a, 16, name)
	if err != nil {
		t.Fatal(err)
	}
	want := "vol/a/ns2/d/" + hh("000000000010000a") + "/000000000010000a/" + hexN(uint64(Frag(name, 16)), 2) + "/" + name
	if key != want {
		t.Fatalf("key %q, want %q", key, want)
	}
	root, dn, err := ParseDentryKey(key)
	if err != nil || root != "vol/a" || dn.Dir != 0x10000a || dn.Name != name || !dn.InFragments(16) {
		t.Fatalf("ParseDentryKey = %q %+v %v", root, dn, err)
	}
	if Frag(name, 1) != 0 || dn.InFragments(0) || dn.InFragments(3) {
		t.Fatal("fragments of F=1, 0 or 3")
	}
	// Fragments spread names: 256 names over 16 fragments fill each one.
	seen := map[uint32]bool{}
	for i := 0; i < 256; i++ {
		seen[Frag(strings.Repeat("n", i+1), 16)] = true
	}
	if len(seen) != 16 {
		t.Fatalf("256 names in %d of 16 fragments", len(seen))
	}
	// The longest name escapes to at most 765 bytes and fits.
	long := strings.Repeat("\xff", namespace.MaxNameLen)
	k, err := DentryKey("r", 1, 256, long)
	if err != nil || !strings.HasSuffix(k, strings.Repeat("%FF", namespace.MaxNameLen)) {
		t.Fatalf("255-byte name: %q, %v", k, err)
	}
	if _, got, err := ParseDentryKey(k); err != nil || got.Name != long {
		t.Fatalf("255-byte name parsed: %v", err)
	}
}

func TestKeysRefused(t *testing.T) {
	long := strings.Repeat("r", MaxKeyLen)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"dentry ino 0", second(DentryKey("r", 0, 1, "a"))},
		{"dentry 0 fragments", second(DentryKey("r", 1, 0, "a"))},
		{"dentry 3 fragments", second(DentryKey("r", 1, 3, "a"))},
		{"dentry 512 fragments", second(DentryKey("r", 1, 512, "a"))},
		{"dentry empty name", second(DentryKey("r", 1, 1, ""))},
		{"dentry name ..", second(DentryKey("r", 1, 1, ".."))},
		{"dentry name with /", second(DentryKey("r", 1, 1, "a/b"))},
		{"dentry name with NUL", second(DentryKey("r", 1, 1, "a\x00"))},
		{"dentry name of 256 bytes", second(DentryKey("r", 1, 1, strings.Repeat("a", 256)))},
		{"dentry key over 1024 bytes", second(DentryKey(long, 1, 1, "a"))},
		{"inode ino 0", second(InodeKey("r", 0))},
		{"decision bad id", second(DecisionKey("r", "ABCDEF0123456789abcdef0123456789"))},
		{"batch past 2^44", second(BatchKey("r", 1<<44))},
		{"lease directory 0", second(LeaseKey("r", 0, idA))},
		{"lease bad mount", second(LeaseKey("r", 1, "x"))},
		{"seal directory 0", second(SealKey("r", 0))},
		{"digest bad mount", second(DigestKey("r", 1, idA[:31]))},
		{"orphan bad file id", second(OrphanKey("r", idA+"0"))},
		{"orphan key over 1024 bytes", second(OrphanKey(long, idA))},
	} {
		if c.err == nil {
			t.Errorf("%s: made a key", c.what)
		} else if !errors.Is(c.err, ErrBadKey) && !errors.Is(c.err, namespace.ErrInvalid) && !errors.Is(c.err, namespace.ErrNameTooLong) {
			t.Errorf("%s: %v, not a key error", c.what, c.err)
		}
	}
}

// otherHH is a spreading prefix other than seg's.
func otherHH(seg string) string {
	if hh(seg) == "00" {
		return "01"
	}
	return "00"
}

func second[T any](_ T, err error) error { return err }

// parseAny parses key as each kind of key, returning the kinds that took it
// and the key their Key function makes from what they parsed.
func parseAny(key string) map[string]string {
	out := map[string]string{}
	if root, dn, err := ParseDentryKey(key); err == nil {
		// The fragment count is not in the key; the smallest with the
		// key's fragment makes the same key.
		out["dentry"], _ = DentryKey(root, dn.Dir, minFrags(dn.Frag), dn.Name)
	}
	if root, ino, err := ParseInodeKey(key); err == nil {
		out["inode"], _ = InodeKey(root, ino)
	}
	if root, tx, err := ParseDecisionKey(key); err == nil {
		out["decision"], _ = DecisionKey(root, tx)
	}
	if root, b, err := ParseBatchKey(key); err == nil {
		out["batch"], _ = BatchKey(root, b)
	}
	if root, dir, m, err := ParseLeaseKey(key); err == nil {
		out["lease"], _ = LeaseKey(root, dir, m)
	}
	if root, dir, err := ParseSealKey(key); err == nil {
		out["seal"], _ = SealKey(root, dir)
	}
	if root, dir, m, err := ParseDigestKey(key); err == nil {
		out["digest"], _ = DigestKey(root, dir, m)
	}
	if root, f, err := ParseOrphanKey(key); err == nil {
		out["orphan"], _ = OrphanKey(root, f)
	}
	if root, err := ParseRootKey(key); err == nil {
		out["root"] = RootKey(root)
	}
	return out
}

func validKeys() map[string]string {
	must := func(k string, err error) string {
		if err != nil {
			panic(err)
		}
		return k
	}
	return map[string]string{
		"dentry":   must(DentryKey("vol", 2, 4, "a b%\xff")),
		"inode":    must(InodeKey("vol", 1<<40)),
		"decision": must(DecisionKey("", idA)),
		"batch":    must(BatchKey("a/b", 7)),
		"lease":    must(LeaseKey("vol", 2, idB)),
		"seal":     must(SealKey("vol", 2)),
		"digest":   must(DigestKey("vol", 2, idB)),
		"orphan":   must(OrphanKey("vol", idA)),
		"root":     RootKey("a/b"),
	}
}

func TestParseKeys(t *testing.T) {
	for kind, key := range validKeys() {
		got := parseAny(key)
		if len(got) != 1 || got[kind] != key {
			t.Errorf("%s key %q parsed as %v", kind, key, got)
		}
	}
	d, _ := DentryKey("vol", 2, 4, "a")
	dseg := hexN(2, 16)
	for _, key := range []string{
		"",
		"ns2/d",
		"/ns2/seal/0000000000000002", // an empty root segment
		"vol//ns2/seal/0000000000000002",
		"vol/ns2/seal/2",
		"vol/ns2/seal/0000000000000000",
		"vol/ns2/seal/000000000000000A",
		"vol/ns2/seal/0000000000000002/x",
		"vol/ns2/d/" + hh(dseg) + "/" + dseg + "/" + hexN(uint64(Frag("a", 4)), 2) + "/%61",
		"vol/ns2/d/" + hh(dseg) + "/" + dseg + "/" + hexN(uint64(Frag("a", 4)), 2) + "/..",
		"vol/ns2/d/" + hh(dseg) + "/" + dseg + "/" + hexN(uint64(Frag("a", 4)), 2) + "/",
		"vol/ns2/d/" + hh(dseg) + "/" + dseg + "/1/a",
		"vol/ns2/d/zz/" + dseg + "/00/a",
		"vol/ns2/d/" + otherHH(dseg) + "/" + dseg + "/" + hexN(uint64(Frag("a", 4)), 2) + "/a",
		"vol/ns2/d/" + hh(dseg) + "/" + dseg + "/" + hexN(uint64(Frag("a", 256)^0x80), 2) + "/a",
		strings.Replace(d, "/ns2/d/", "/ns2/i/", 1),
		"vol/ns2/ino/0000000007",
		"vol/ns2/ino/fffffffffffff",
		"vol/ns2/lease/0000000000000002/" + idA[1:],
		"vol/ns2/orphan/" + strings.ToUpper(idA),
		"vol/ns2/tx/00/" + idA,
		"vol/ns2/digest/" + hh(dseg) + "/" + dseg,
		strings.Repeat("r/", 600) + "ns2/seal/0000000000000002",
	} {
		if got := parseAny(key); len(got) != 0 {
			t.Errorf("%q parsed as %v", key, got)
		}
	}
}

// TestGolden pins keys and bytes: they are the format, and a change to the
// hash, the escaping or the encoding would strand every stored object.
func TestGolden(t *testing.T) {
	keys := []struct {
		got  func() (string, error)
		want string
	}{
		{func() (string, error) { return DentryKey("vol", 0x100005, 16, "shard_0007.pt") },
			"vol/ns2/d/bf/0000000000100005/08/shard_0007.pt"},
		{func() (string, error) { return InodeKey("vol/", 0x100007) }, "vol/ns2/i/c2/0000000000100007"},
		{func() (string, error) { return DecisionKey("/vol", idA) }, "vol/ns2/tx/01/" + idA},
		{func() (string, error) { return BatchKey("", 1) }, "ns2/ino/00000000001"},
		{func() (string, error) { return LeaseKey("vol", 2, idB) }, "vol/ns2/lease/0000000000000002/" + idB},
		{func() (string, error) { return SealKey("vol", 2) }, "vol/ns2/seal/0000000000000002"},
		{func() (string, error) { return DigestKey("vol", 2, idB) }, "vol/ns2/digest/c9/0000000000000002/" + idB},
		{func() (string, error) { return OrphanKey("vol", idA) }, "vol/ns2/orphan/" + idA},
	}
	for _, k := range keys {
		if got, err := k.got(); err != nil || got != k.want {
			t.Errorf("key %q, %v; want %q", got, err, k.want)
		}
	}
	d, err := EncodeDentry(&Dentry{Dir: 2, Frags: 1, Name: "b", Change: idA,
		Bound: &Binding{Ino: 3, Kind: namespace.KindFile, Node: &Attrs{Mode: 0o644, FileID: idB}}})
	want := "CKN2\x01\x01\x00\x00\xa5\x00\x00\x00O\x9f\x15\xc2" +
		`{"p":2,"pf":1,"n":"b","c":"` + idA + `","b":{"i":3,"k":1,"a":{"m":420,"u":0,"g":0,"at":0,"mt":0,"ct":0,"f":"` + idB + `"}}}`
	if err != nil || string(d) != want {
		t.Errorf("dentry %q, %v;\nwant %q", d, err, want)
	}
	if BatchOf(FirstIno(7)) != 7 || BatchOf(FirstIno(8)-1) != 7 || FirstIno(1) != 1<<20 {
		t.Error("BatchOf and FirstIno disagree")
	}
}
