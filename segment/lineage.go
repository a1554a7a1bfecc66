package segment

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/staging"
)

// ---------------------------------------------------------------------------
// Lineage
//
// A file copied by reference (engine File.CloneFrom) points at the objects of
// the file it was copied from instead of copying them: its checkpoint's block
// map is the source's, and the pointers keep their names "<cno>.<part>". The
// lineage says whose objects those names are: entry i owns every object
// name whose cno is at most Upto_i and above Upto_(i-1); cnos above the last
// entry's Upto are the file's own. The copy's own checkpoints are numbered
// past the last Upto, so one number never means two objects.
//
// A lineage is made once, by the checkpoint that copied the file (its cno is
// Inode.Lineage of that checkpoint and of every later one built on it), and
// stored as the object "lineage/<cno>" under the file's prefix (cno in
// decimal, zero-padded to 10 digits), little-endian. These offsets are part
// of the format.
//
//	off size field
//	  0   8  magic "CKPTLIN1"
//	  8   2  version (1)
//	 10   2  entries n (1..MaxLineage)
//	 12   4  reserved, zero
//	 16   8  file tag of the file the lineage belongs to
//	 24   8  cno of the checkpoint that made it (the number in its key)
//	 32      n entries, in ascending Upto, each:
//	           8  upto: the newest cno of that file's objects named here
//	           1  id length k (1..MaxFileIDBytes)
//	           k  file id: [0-9A-Za-z_-]
//	end-4 4  CRC-32C of every byte before it
//
// Every Upto is below the lineage's cno. A file id is checked before it names
// a key: a lineage read from the bucket never points outside the volume's
// files.

const (
	lineageMagic = "CKPTLIN1"
	// LineageVersion is the lineage layout this build writes and reads.
	LineageVersion = 1
	// MaxLineage is how many files a lineage may name: a copy of a copy of
	// ... this deep is copied by value instead.
	MaxLineage = 16
	// MaxFileIDBytes is the longest file id a lineage may name.
	MaxFileIDBytes = 64
	// LineageDir is where lineage objects live under a file's prefix.
	LineageDir = "lineage/"

	lineageFixed = 32
	// MaxLineageBytes bounds a lineage object.
	MaxLineageBytes = lineageFixed + MaxLineage*(9+MaxFileIDBytes) + 4
)

// LineageEntry names the file whose objects are those with cno at most Upto
// (and above the previous entry's Upto).
type LineageEntry struct {
	FileID string
	Upto   uint64
}

// Lineage is the decoded lineage object of a file.
type Lineage struct {
	FileTag uint64 // the file it belongs to
	Cno     uint64 // the checkpoint that made it
	Entries []LineageEntry
}

// LineageKey is the key of the lineage made by checkpoint cno of the file at
// prefix.
func LineageKey(prefix string, cno uint64) string {
	return fmt.Sprintf("%s%s%010d", prefix, LineageDir, cno)
}

// Owner returns the index of the entry that owns objects of cno, or -1 when
// they are the file's own.
func (l *Lineage) Owner(cno uint64) int {
	if l == nil {
		return -1
	}
	for i, e := range l.Entries {
		if cno <= e.Upto {
			return i
		}
	}
	return -1
}

// ValidFileID reports whether id may name a file in a lineage: 1 to
// MaxFileIDBytes bytes of [0-9A-Za-z_-], so that it cannot leave the
// volume's files when it is made into a key.
func ValidFileID(id string) bool {
	if len(id) == 0 || len(id) > MaxFileIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func (l *Lineage) validate() error {
	switch {
	case len(l.Entries) == 0 || len(l.Entries) > MaxLineage:
		return corrupt(ErrInvalid, "is a lineage of %d files (want 1..%d)", len(l.Entries), MaxLineage)
	case l.Cno == 0:
		return corrupt(ErrInvalid, "is a lineage made by checkpoint 0")
	}
	var prev uint64
	for i, e := range l.Entries {
		switch {
		case !ValidFileID(e.FileID):
			return corrupt(ErrInvalid, "names file %q in lineage entry %d (want 1..%d of [0-9A-Za-z_-])", e.FileID, i, MaxFileIDBytes)
		case e.Upto <= prev:
			return corrupt(ErrInvalid, "has lineage entry %d up to checkpoint %d, not above the previous %d", i, e.Upto, prev)
		case e.Upto >= l.Cno:
			return corrupt(ErrInvalid, "has lineage entry %d up to checkpoint %d, not below the lineage's own %d", i, e.Upto, l.Cno)
		}
		prev = e.Upto
	}
	return nil
}

// EncodeLineage returns the bytes of l, refusing a lineage no reader accepts.
func EncodeLineage(l Lineage) ([]byte, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	n := lineageFixed + 4
	for _, e := range l.Entries {
		n += 9 + len(e.FileID)
	}
	b := make([]byte, lineageFixed, n)
	copy(b, lineageMagic)
	le.PutUint16(b[8:], LineageVersion)
	le.PutUint16(b[10:], uint16(len(l.Entries)))
	le.PutUint64(b[16:], l.FileTag)
	le.PutUint64(b[24:], l.Cno)
	for _, e := range l.Entries {
		b = le.AppendUint64(b, e.Upto)
		b = append(b, byte(len(e.FileID)))
		b = append(b, e.FileID...)
	}
	return le.AppendUint32(b, Checksum(b)), nil
}

// DecodeLineage parses a lineage object. Refusals are *CorruptError (or
// *UnsupportedError for a newer version).
func DecodeLineage(b []byte) (Lineage, error) {
	if len(b) < lineageFixed+4 || len(b) > MaxLineageBytes {
		return Lineage{}, corrupt(ErrSize, "is %d bytes, a lineage is %d to %d", len(b), lineageFixed+4, MaxLineageBytes)
	}
	if string(b[:8]) != lineageMagic {
		return Lineage{}, corrupt(ErrBadMagic, "has bad magic %q, want %q", b[:8], lineageMagic)
	}
	if got, want := le.Uint32(b[len(b)-4:]), Checksum(b[:len(b)-4]); got != want {
		return Lineage{}, corrupt(ErrChecksum, "fails its checksum (stored %#08x, computed %#08x)", got, want)
	}
	switch v := le.Uint16(b[8:]); {
	case v == 0:
		return Lineage{}, corrupt(ErrInvalid, "has lineage version 0")
	case v > LineageVersion:
		return Lineage{}, &UnsupportedError{What: "lineage version", Version: v, Supported: LineageVersion}
	}
	if !allZero(b[12:16]) {
		return Lineage{}, corrupt(ErrInvalid, "has non-zero reserved bytes in a lineage")
	}
	n := int(le.Uint16(b[10:]))
	if n == 0 || n > MaxLineage {
		return Lineage{}, corrupt(ErrInvalid, "is a lineage of %d files (want 1..%d)", n, MaxLineage)
	}
	l := Lineage{FileTag: le.Uint64(b[16:]), Cno: le.Uint64(b[24:]), Entries: make([]LineageEntry, 0, n)}
	p := b[lineageFixed : len(b)-4]
	for i := range n {
		if len(p) < 9 {
			return Lineage{}, corrupt(ErrSize, "ends inside lineage entry %d", i)
		}
		upto, k := le.Uint64(p), int(p[8])
		p = p[9:]
		if k > len(p) {
			return Lineage{}, corrupt(ErrSize, "ends inside the file id of lineage entry %d", i)
		}
		l.Entries = append(l.Entries, LineageEntry{FileID: string(p[:k]), Upto: upto})
		p = p[k:]
	}
	if len(p) != 0 {
		return Lineage{}, corrupt(ErrSize, "has %d bytes after its %d entries", len(p), n)
	}
	if err := l.validate(); err != nil {
		return Lineage{}, err
	}
	return l, nil
}

// ReadLineage reads and checks the lineage made by checkpoint cno of the
// file tagged fileTag at prefix.
func ReadLineage(ctx context.Context, st staging.Store, prefix string, fileTag, cno uint64) (Lineage, error) {
	key := LineageKey(prefix, cno)
	b, info, err := st.Get(ctx, key, staging.Bytes(0, MaxLineageBytes+1))
	if errors.Is(err, staging.ErrInvalidRange) {
		return Lineage{}, &CorruptError{Key: key, Err: ErrSize, Detail: "is empty"}
	}
	if err != nil {
		return Lineage{}, fmt.Errorf("read lineage %s: %w", key, err)
	}
	if len(b) > MaxLineageBytes || info.Size > MaxLineageBytes {
		return Lineage{}, fmt.Errorf("read lineage %s: %w", key,
			&staging.TooLargeError{Key: key, Size: max(info.Size, int64(len(b))), Limit: MaxLineageBytes})
	}
	l, err := DecodeLineage(b)
	if err != nil {
		return Lineage{}, withKey(err, key)
	}
	switch {
	case l.FileTag != fileTag:
		return Lineage{}, &CorruptError{Key: key, Err: ErrWrongObject,
			Detail: fmt.Sprintf("is the lineage of another file (tag %#016x, expected %#016x)", l.FileTag, fileTag)}
	case l.Cno != cno:
		return Lineage{}, &CorruptError{Key: key, Err: ErrWrongObject,
			Detail: fmt.Sprintf("is the lineage of checkpoint %d, not %d", l.Cno, cno)}
	}
	return l, nil
}
