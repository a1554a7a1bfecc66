package wal

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors; callers decide with errors.Is.
var (
	// ErrCorrupt: a record is damaged, foreign or not what its name says.
	// Every *CorruptError is one.
	ErrCorrupt = errors.New("corrupt wal record")
	// ErrTruncated: a record shorter than its own header and ops say, what
	// an upload cut short leaves on a server that keeps what it received.
	// Such a *CorruptError is both ErrCorrupt and ErrTruncated.
	ErrTruncated = errors.New("wal record cut short")
	// ErrBusy: another live writer holds the log's lease. Every *BusyError
	// is one.
	ErrBusy = errors.New("wal held by another writer")
	// ErrTaken: a record name this log picked was created by another writer;
	// the log has failed. Every *TakenError is one.
	ErrTaken = errors.New("wal record taken by another writer")
	// ErrLeaseLost: another writer took the lease; the log appends no more.
	ErrLeaseLost = errors.New("wal lease lost")
	// ErrRecordTooLarge: the ops of one Append would make a record over
	// MaxRecordSize.
	ErrRecordTooLarge = errors.New("wal record too large")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("wal closed")
)

// CorruptError is the refusal of a record. Reason says what is wrong;
// Truncated, that the record ends before its header and ops do.
type CorruptError struct {
	Key       string
	Reason    string
	Truncated bool
}

func (e *CorruptError) Error() string { return "wal record " + e.Key + ": " + e.Reason }

// Unwrap returns ErrCorrupt, and ErrTruncated for a record cut short.
func (e *CorruptError) Unwrap() []error {
	if e.Truncated {
		return []error{ErrCorrupt, ErrTruncated}
	}
	return []error{ErrCorrupt}
}

// BusyError is the refusal of Open while another writer holds the lease.
// Owner is what the owner object says; it is zero where it could not be read.
type BusyError struct {
	Key   string // the owner object
	Owner OwnerInfo
}

func (e *BusyError) Error() string {
	prefix := strings.TrimSuffix(e.Key, Dir+OwnerName)
	o := e.Owner
	if o.Writer == "" {
		if o.Expires.IsZero() {
			return fmt.Sprintf("wal of %s is held by another writer: one writer at a time", prefix)
		}
		return fmt.Sprintf("wal of %s is held by another writer until %s: one writer at a time",
			prefix, o.Expires.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("wal of %s is held by writer %s (pid %d on host %s) until %s: one writer at a time",
		prefix, o.Writer, o.PID, o.Host, o.Expires.Format(time.RFC3339Nano))
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// TakenError says a record name was created by another writer: two writers
// append to one log, and this one stopped.
type TakenError struct {
	Key    string
	Writer string // the id on the record ("" if it has none)
}

func (e *TakenError) Error() string {
	return "wal record " + e.Key + " was written by another writer"
}

// Unwrap returns ErrTaken.
func (e *TakenError) Unwrap() error { return ErrTaken }
