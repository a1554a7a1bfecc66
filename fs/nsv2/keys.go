package nsv2

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/zeebo/xxh3"
)

// Bounds of the key layout. These are part of the format.
const (
	MaxKeyLen   = 1024 // bytes of a key, S3's bound
	MaxFrags    = 256  // fragments of one directory
	BatchShift  = 20   // a batch claim holds 2^20 inos
	maxBatch    = 1<<(64-BatchShift) - 1
	inoDigits   = 16
	batchDigits = 11
	fragDigits  = 2
	idDigits    = 32
	dirPrefix   = "ns2/"
)

// ErrBadKey is the error of a key that is not one of the layout's, or of a
// key a Key function is asked to make out of bounds.
var ErrBadKey = errors.New("not a namespace v2 key")

func badKey(key, format string, args ...any) error {
	return fmt.Errorf("key %q: %s: %w", key, fmt.Sprintf(format, args...), ErrBadKey)
}

// rootPrefix is root as the start of a key: "" or "<root>/".
func rootPrefix(root string) string {
	root = strings.Trim(root, "/")
	if root == "" {
		return ""
	}
	return root + "/"
}

// hh is the spreading prefix of segment seg.
func hh(seg string) string {
	return fmt.Sprintf("%02x", byte(xxh3.HashString(seg)>>56))
}

func hexN(v uint64, digits int) string { return fmt.Sprintf("%0*x", digits, v) }

// parseHexN parses exactly digits lower-case hex digits.
func parseHexN(s string, digits int) (uint64, bool) {
	if len(s) != digits {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

// ValidID says whether s is a change, mount or file id: 32 lower-case hex
// digits, as namespace.NewFileID makes them.
func ValidID(s string) bool {
	if len(s) != idDigits {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidFrags says whether f is a fragment count: a power of two from 1 to
// MaxFrags.
func ValidFrags(f uint32) bool { return f >= 1 && f <= MaxFrags && f&(f-1) == 0 }

// Frag is the fragment of name in a directory of frags fragments.
func Frag(name string, frags uint32) uint32 {
	return uint32(xxh3.HashString(name) & uint64(frags-1))
}

// CheckName checks a name as v1 does: 1 to 255 bytes, not "." or "..", no
// '/' or NUL.
func CheckName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("name %q: %w", name, namespace.ErrInvalid)
	case len(name) > namespace.MaxNameLen:
		return fmt.Errorf("name of %d bytes: %w", len(name), namespace.ErrNameTooLong)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q: %w", name, namespace.ErrInvalid)
	}
	return nil
}

// escaped says whether byte c is written %XX in a key.
func escaped(c byte) bool { return c < 0x20 || c > 0x7e || c == '%' || c == '/' }

const upperHex = "0123456789ABCDEF"

// EscapeName is name as a key segment.
func EscapeName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if escaped(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// UnescapeName undoes EscapeName, and refuses any segment EscapeName would
// not have written: EscapeName(UnescapeName(s)) == s for every s it accepts.
func UnescapeName(seg string) (string, error) {
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '%' {
			if escaped(c) {
				return "", fmt.Errorf("byte %#02x at %d is not escaped", c, i)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(seg) {
			return "", fmt.Errorf("%% at %d without two hex digits", i)
		}
		hi, lo := strings.IndexByte(upperHex, seg[i+1]), strings.IndexByte(upperHex, seg[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%% at %d not followed by two upper-case hex digits", i)
		}
		v := byte(hi<<4 | lo)
		if !escaped(v) {
			return "", fmt.Errorf("%%%s at %d escapes %q, which is written as itself", seg[i+1:i+3], i, v)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

// finish bounds a made key.
func finish(key string) (string, error) {
	if len(key) > MaxKeyLen {
		return "", badKey(key[:64]+"...", "%d bytes, over %d", len(key), MaxKeyLen)
	}
	return key, nil
}

// split cuts key into its root and the n segments after <root>/ns2/<dir>/,
// refusing a key of another shape.
func split(key, dir string, n int) (root string, segs []string, err error) {
	if len(key) > MaxKeyLen {
		return "", nil, badKey(key[:64]+"...", "%d bytes, over %d", len(key), MaxKeyLen)
	}
	parts := strings.Split(key, "/")
	if len(parts) < n+2 {
		return "", nil, badKey(key, "not under %s%s/", dirPrefix, dir)
	}
	at := len(parts) - n - 2
	if parts[at] != "ns2" || parts[at+1] != dir {
		return "", nil, badKey(key, "not under %s%s/", dirPrefix, dir)
	}
	root = strings.Join(parts[:at], "/")
	raw := root
	if at > 0 {
		raw += "/"
	}
	// The root as rootPrefix writes it: no empty segment at either end.
	if rootPrefix(root) != raw {
		return "", nil, badKey(key, "root %q is not a root", root)
	}
	return root, parts[at+2:], nil
}

func parseIno(key, seg, what string) (namespace.Ino, error) {
	v, ok := parseHexN(seg, inoDigits)
	if !ok || v == 0 {
		return 0, badKey(key, "%s %q is not %d hex digits of a nonzero ino", what, seg, inoDigits)
	}
	return namespace.Ino(v), nil
}

func checkHH(key, got, seg string) error {
	if got != hh(seg) {
		return badKey(key, "prefix %q, want %q", got, hh(seg))
	}
	return nil
}

// DentryName is what a dentry key says: the directory, the fragment the
// name is in, and the name.
type DentryName struct {
	Dir  namespace.Ino
	Frag uint32
	Name string
}

// DentryKey is the key of name in directory dir of frags fragments.
func DentryKey(root string, dir namespace.Ino, frags uint32, name string) (string, error) {
	if dir == 0 || !ValidFrags(frags) {
		return "", fmt.Errorf("dentry key: directory %d of %d fragments: %w", dir, frags, ErrBadKey)
	}
	if err := CheckName(name); err != nil {
		return "", fmt.Errorf("dentry key: %w", err)
	}
	d := hexN(uint64(dir), inoDigits)
	return finish(rootPrefix(root) + dirPrefix + "d/" + hh(d) + "/" + d + "/" +
		hexN(uint64(Frag(name, frags)), fragDigits) + "/" + EscapeName(name))
}

// ParseDentryKey parses a dentry key. The fragment is checked against the
// directory's fragment count by the caller that knows it (InFragments);
// DecodeDentry checks it against the count the dentry carries. Here it is
// only checked to be the name's in some count.
func ParseDentryKey(key string) (root string, dn DentryName, err error) {
	root, s, err := split(key, "d", 4)
	if err != nil {
		return "", DentryName{}, err
	}
	if dn.Dir, err = parseIno(key, s[1], "directory"); err != nil {
		return "", DentryName{}, err
	}
	if err := checkHH(key, s[0], s[1]); err != nil {
		return "", DentryName{}, err
	}
	f, ok := parseHexN(s[2], fragDigits)
	if !ok {
		return "", DentryName{}, badKey(key, "fragment %q is not %d hex digits", s[2], fragDigits)
	}
	dn.Frag = uint32(f)
	if dn.Name, err = UnescapeName(s[3]); err != nil {
		return "", DentryName{}, badKey(key, "name: %v", err)
	}
	if err := CheckName(dn.Name); err != nil {
		return "", DentryName{}, badKey(key, "%v", err)
	}
	// A fragment no count gives the name was not made by DentryKey.
	if !dn.InFragments(minFrags(dn.Frag)) {
		return "", DentryName{}, badKey(key, "fragment %d is not the name's in any fragment count", dn.Frag)
	}
	return root, dn, nil
}

// minFrags is the smallest fragment count that has fragment frag: a name in
// fragment frag of any count is in frag of this one too.
func minFrags(frag uint32) uint32 {
	f := uint32(1)
	for f <= frag {
		f *= 2
	}
	return f
}

// InFragments says whether the key's fragment is its name's in a directory
// of frags fragments.
func (dn DentryName) InFragments(frags uint32) bool {
	return ValidFrags(frags) && Frag(dn.Name, frags) == dn.Frag
}

// InodeKey is the key of the inode object of ino.
func InodeKey(root string, ino namespace.Ino) (string, error) {
	if ino == 0 {
		return "", fmt.Errorf("inode key: ino 0: %w", ErrBadKey)
	}
	i := hexN(uint64(ino), inoDigits)
	return finish(rootPrefix(root) + dirPrefix + "i/" + hh(i) + "/" + i)
}

// ParseInodeKey parses an inode object's key.
func ParseInodeKey(key string) (root string, ino namespace.Ino, err error) {
	root, s, err := split(key, "i", 2)
	if err != nil {
		return "", 0, err
	}
	if ino, err = parseIno(key, s[1], "ino"); err != nil {
		return "", 0, err
	}
	return root, ino, checkHH(key, s[0], s[1])
}

func checkID(what, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%s %q is not %d lower-case hex digits: %w", what, id, idDigits, ErrBadKey)
	}
	return nil
}

// DecisionKey is the key of the decision of change tx.
func DecisionKey(root, tx string) (string, error) {
	if err := checkID("change id", tx); err != nil {
		return "", fmt.Errorf("decision key: %w", err)
	}
	return finish(rootPrefix(root) + dirPrefix + "tx/" + hh(tx) + "/" + tx)
}

// ParseDecisionKey parses a decision's key.
func ParseDecisionKey(key string) (root, tx string, err error) {
	root, s, err := split(key, "tx", 2)
	if err != nil {
		return "", "", err
	}
	if !ValidID(s[1]) {
		return "", "", badKey(key, "change id %q", s[1])
	}
	return root, s[1], checkHH(key, s[0], s[1])
}

// BatchOf is the batch that holds ino.
func BatchOf(ino namespace.Ino) uint64 { return uint64(ino) >> BatchShift }

// FirstIno is the first ino of batch.
func FirstIno(batch uint64) namespace.Ino { return namespace.Ino(batch << BatchShift) }

// BatchKey is the key of the claim of inode batch batch.
func BatchKey(root string, batch uint64) (string, error) {
	if batch > maxBatch {
		return "", fmt.Errorf("batch key: batch %d past %d: %w", batch, uint64(maxBatch), ErrBadKey)
	}
	return finish(rootPrefix(root) + dirPrefix + "ino/" + hexN(batch, batchDigits))
}

// ParseBatchKey parses a batch claim's key.
func ParseBatchKey(key string) (root string, batch uint64, err error) {
	root, s, err := split(key, "ino", 1)
	if err != nil {
		return "", 0, err
	}
	batch, ok := parseHexN(s[0], batchDigits)
	if !ok || batch > maxBatch {
		return "", 0, badKey(key, "batch %q is not %d hex digits", s[0], batchDigits)
	}
	return root, batch, nil
}

// LeaseKey is the key of mount's create lease on directory dir.
func LeaseKey(root string, dir namespace.Ino, mount string) (string, error) {
	if dir == 0 {
		return "", fmt.Errorf("lease key: directory 0: %w", ErrBadKey)
	}
	if err := checkID("mount id", mount); err != nil {
		return "", fmt.Errorf("lease key: %w", err)
	}
	return finish(rootPrefix(root) + dirPrefix + "lease/" + hexN(uint64(dir), inoDigits) + "/" + mount)
}

// ParseLeaseKey parses a lease's key.
func ParseLeaseKey(key string) (root string, dir namespace.Ino, mount string, err error) {
	root, s, err := split(key, "lease", 2)
	if err != nil {
		return "", 0, "", err
	}
	if dir, err = parseIno(key, s[0], "directory"); err != nil {
		return "", 0, "", err
	}
	if !ValidID(s[1]) {
		return "", 0, "", badKey(key, "mount id %q", s[1])
	}
	return root, dir, s[1], nil
}

// SealKey is the key of the seal of directory dir.
func SealKey(root string, dir namespace.Ino) (string, error) {
	if dir == 0 {
		return "", fmt.Errorf("seal key: directory 0: %w", ErrBadKey)
	}
	return finish(rootPrefix(root) + dirPrefix + "seal/" + hexN(uint64(dir), inoDigits))
}

// ParseSealKey parses a seal's key.
func ParseSealKey(key string) (root string, dir namespace.Ino, err error) {
	root, s, err := split(key, "seal", 1)
	if err != nil {
		return "", 0, err
	}
	dir, err = parseIno(key, s[0], "directory")
	return root, dir, err
}

// DigestKey is the key of mount's digest of its names in directory dir.
func DigestKey(root string, dir namespace.Ino, mount string) (string, error) {
	if dir == 0 {
		return "", fmt.Errorf("digest key: directory 0: %w", ErrBadKey)
	}
	if err := checkID("mount id", mount); err != nil {
		return "", fmt.Errorf("digest key: %w", err)
	}
	d := hexN(uint64(dir), inoDigits)
	return finish(rootPrefix(root) + dirPrefix + "digest/" + hh(d) + "/" + d + "/" + mount)
}

// ParseDigestKey parses a digest's key.
func ParseDigestKey(key string) (root string, dir namespace.Ino, mount string, err error) {
	root, s, err := split(key, "digest", 3)
	if err != nil {
		return "", 0, "", err
	}
	if dir, err = parseIno(key, s[1], "directory"); err != nil {
		return "", 0, "", err
	}
	if err := checkHH(key, s[0], s[1]); err != nil {
		return "", 0, "", err
	}
	if !ValidID(s[2]) {
		return "", 0, "", badKey(key, "mount id %q", s[2])
	}
	return root, dir, s[2], nil
}

// OrphanKey is the key of the orphan record of file fileID.
func OrphanKey(root, fileID string) (string, error) {
	if err := checkID("file id", fileID); err != nil {
		return "", fmt.Errorf("orphan key: %w", err)
	}
	return finish(rootPrefix(root) + dirPrefix + "orphan/" + fileID)
}

// ParseOrphanKey parses an orphan record's key.
func ParseOrphanKey(key string) (root, fileID string, err error) {
	root, s, err := split(key, "orphan", 1)
	if err != nil {
		return "", "", err
	}
	if !ValidID(s[0]) {
		return "", "", badKey(key, "file id %q", s[0])
	}
	return root, s[0], nil
}
