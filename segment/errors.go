package segment

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every refusal of an object is a *CorruptError (or, for a
// layout written by a newer build, an *UnsupportedError) that wraps one of
// them; callers decide with errors.Is.
var (
	// ErrCorrupt is the class of every refusal but ErrUnsupported: the object
	// is damaged, foreign or not what its name says. errors.Is(err, ErrCorrupt)
	// holds for any *CorruptError.
	ErrCorrupt = errors.New("corrupt object")
	// ErrBadMagic: the bytes do not start with the structure's magic.
	ErrBadMagic = errors.New("bad magic")
	// ErrChecksum: the stored CRC-32C does not match the bytes.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrSize: lengths do not add up (the header's counts against the object's
	// length, a region shorter than its counts, a structure of the wrong size).
	ErrSize = errors.New("size mismatch")
	// ErrWrongObject: the object names another checkpoint, part or file than
	// the key it was read from (for instance an object copied under another
	// file).
	ErrWrongObject = errors.New("wrong object")
	// ErrFormat: the object's layout is not the one the reader expected.
	ErrFormat = errors.New("unexpected format")
	// ErrInvalid: a field holds a value no writer produces (format not 1 or 2,
	// height over MaxHeight, a block size that is not a power of two in range,
	// non-zero reserved bytes, ...).
	ErrInvalid = errors.New("impossible field value")
	// ErrUnsupported: the object was written with a newer layout version than
	// this build reads. It is not corrupt; it is its own class, not ErrCorrupt.
	ErrUnsupported = errors.New("unsupported layout version")
	// ErrBadName: a string is not an object name "<cno>.<part>" or "<cno>".
	ErrBadName = errors.New("not an object name")
)

// CorruptError is the refusal of an object (or of bytes decoded on their own,
// Key then being empty). Err is one of the sentinels above; Detail says what
// was wrong, in words that follow "object <key> ".
type CorruptError struct {
	Key    string
	Err    error
	Detail string
}

func (e *CorruptError) Error() string {
	if e.Key == "" {
		return "object " + e.Detail
	}
	return "object " + e.Key + " " + e.Detail
}

// Unwrap returns the sentinel.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes every CorruptError an ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// UnsupportedError refuses an object written with a newer layout version. It
// wraps ErrUnsupported and is not an ErrCorrupt: a newer build wrote the object.
type UnsupportedError struct {
	Key       string
	What      string // "layout version" or "head version"
	Version   uint16 // the version found
	Supported uint16 // the newest version this build reads
}

func (e *UnsupportedError) Error() string {
	key := e.Key
	if key != "" {
		key += " "
	}
	return fmt.Sprintf("object %shas %s %d; this build reads up to %d", key, e.What, e.Version, e.Supported)
}

// Unwrap returns ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// corrupt builds a *CorruptError without a key; readers set it with withKey.
func corrupt(err error, format string, args ...any) *CorruptError {
	return &CorruptError{Err: err, Detail: fmt.Sprintf(format, args...)}
}

// withKey names key in a refusal produced by a decoder that did not know it.
// Other errors pass through unchanged.
func withKey(err error, key string) error {
	var ce *CorruptError
	if errors.As(err, &ce) && ce.Key == "" {
		c := *ce
		c.Key = key
		return &c
	}
	var ue *UnsupportedError
	if errors.As(err, &ue) && ue.Key == "" {
		u := *ue
		u.Key = key
		return &u
	}
	return err
}
