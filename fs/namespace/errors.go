package namespace

import (
	"errors"
	"fmt"
)

// Errors a caller decides on (errors.Is). The FUSE layer maps them to errno
// values; this package knows none.
var (
	// ErrExist: the name (or extended attribute, with XattrCreate) exists.
	ErrExist = errors.New("file exists")
	// ErrNotExist: no such name, node, parent or orphan.
	ErrNotExist = errors.New("no such file or directory")
	// ErrNotEmpty: a directory to remove or replace has entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrNotDir: a directory was expected.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a non-directory was expected.
	ErrIsDir = errors.New("is a directory")
	// ErrInvalid: the request is malformed ("." or ".." as a name, a '/' in a
	// name, a directory moved under itself, bad flags or mode bits).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotPermitted: the operation is never allowed on that node (a hard
	// link to a directory).
	ErrNotPermitted = errors.New("operation not permitted")
	// ErrNotSupported: an extended attribute outside the "user." namespace.
	ErrNotSupported = errors.New("operation not supported")
	// ErrNameTooLong: a name over MaxNameLen bytes, or a symlink target over
	// MaxTargetLen bytes.
	ErrNameTooLong = errors.New("name too long")
	// ErrNoAttr: no extended attribute has that name.
	ErrNoAttr = errors.New("no such attribute")
	// ErrTooBig: an extended attribute value over MaxXattrValueLen bytes.
	ErrTooBig = errors.New("attribute value too large")
	// ErrNoSpace: a node's extended attributes would pass MaxXattrsLen.
	ErrNoSpace = errors.New("no space left for extended attributes")
	// ErrCorrupt: an entry or a snapshot read from the store is malformed,
	// fails its checksum, or does not apply to the state it follows. The
	// error is a *CorruptError naming the object.
	ErrCorrupt = errors.New("corrupt namespace object")
)

// CorruptError is the error of an entry or snapshot that cannot be used.
// errors.Is(err, ErrCorrupt) is true for it.
type CorruptError struct {
	Key    string // the object, when known
	Reason string
}

func (e *CorruptError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("corrupt namespace object: %s", e.Reason)
	}
	return fmt.Sprintf("corrupt namespace object %s: %s", e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(key, format string, args ...any) error {
	return &CorruptError{Key: key, Reason: fmt.Sprintf(format, args...)}
}
