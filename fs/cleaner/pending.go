package cleaner

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// Pending records: what a run found unreferenced, and since when.
//
// The grace of an unreferenced object counts from when a run first found it
// so, not from its age (an old checkpoint that Keep drops now is as old as
// it was when it was read last). A run stores what it found, per file, in
// <root>gc/files/<file-id> (names relative to the file's prefix) and for
// orphaned files in <root>gc/orphans (file ids); a later run deletes an
// entry's object only while it is still unreferenced and its grace has
// passed since the time recorded. Each record is rewritten with only what is
// still pending, so its size follows what is pending now, not the history.
//
// Layout of a record (integers little endian):
//
//	offset  size  field
//	0       8     magic "ckgcpnd1"
//	8       4     n: the number of entries
//	12      ...   n entries, sorted by name, names unique:
//	              0  8  since: Unix nanoseconds of the run that first found it
//	              8  2  len: length of the name (1..MaxPendingName)
//	              10 len name
//	end-4   4     CRC-32C (Castagnoli) of every byte before it
//
// A record is at most MaxPendingBytes; one that does not decode is reported
// and read as empty: everything in it counts as found by this run, which
// only delays deletions.

const (
	// MaxPendingBytes bounds a pending record, read and written.
	MaxPendingBytes = 4 << 20
	// MaxPendingName bounds one entry's name.
	MaxPendingName = 1024

	pendingMagic    = "ckgcpnd1"
	pendingHeader   = 12
	pendingEntryMin = 10
)

// ErrBadPending is the error of a pending record that does not decode.
var ErrBadPending = errors.New("bad pending record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// pending maps a name to when a run first found it unreferenced.
type pending map[string]time.Time

// EncodePending encodes entries (name -> first found). Entries past
// MaxPendingBytes are left out, the most recently found first: a later run
// finds them again, which only delays their deletion.
func EncodePending(entries map[string]time.Time) []byte {
	names := make([]string, 0, len(entries))
	for n := range entries {
		if n != "" && len(n) <= MaxPendingName {
			names = append(names, n)
		}
	}
	size := pendingHeader + 4
	for _, n := range names {
		size += pendingEntryMin + len(n)
	}
	if size > MaxPendingBytes {
		sort.Slice(names, func(i, j int) bool {
			ti, tj := entries[names[i]], entries[names[j]]
			if !ti.Equal(tj) {
				return ti.Before(tj)
			}
			return names[i] < names[j]
		})
		size = pendingHeader + 4
		for i, n := range names {
			if size+pendingEntryMin+len(n) > MaxPendingBytes {
				names = names[:i]
				break
			}
			size += pendingEntryMin + len(n)
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, size)
	b = append(b, pendingMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(names)))
	for _, n := range names {
		b = binary.LittleEndian.AppendUint64(b, uint64(entries[n].UnixNano()))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(n)))
		b = append(b, n...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodePending decodes a pending record; anything malformed is ErrBadPending.
func DecodePending(b []byte) (map[string]time.Time, error) {
	if len(b) < pendingHeader+4 || len(b) > MaxPendingBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadPending, len(b))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: CRC mismatch", ErrBadPending)
	}
	if string(body[:8]) != pendingMagic {
		return nil, fmt.Errorf("%w: magic %q", ErrBadPending, body[:8])
	}
	n := binary.LittleEndian.Uint32(body[8:12])
	rest := body[pendingHeader:]
	if uint64(n)*pendingEntryMin > uint64(len(rest)) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrBadPending, n, len(rest))
	}
	out := make(map[string]time.Time, n)
	prev := ""
	for i := uint32(0); i < n; i++ {
		if len(rest) < pendingEntryMin {
			return nil, fmt.Errorf("%w: entry %d cut short", ErrBadPending, i)
		}
		since := int64(binary.LittleEndian.Uint64(rest))
		l := int(binary.LittleEndian.Uint16(rest[8:]))
		rest = rest[pendingEntryMin:]
		if l == 0 || l > MaxPendingName || l > len(rest) {
			return nil, fmt.Errorf("%w: entry %d: name of %d bytes", ErrBadPending, i, l)
		}
		name := string(rest[:l])
		rest = rest[l:]
		if i > 0 && name <= prev {
			return nil, fmt.Errorf("%w: entry %d: names not sorted", ErrBadPending, i)
		}
		prev = name
		out[name] = time.Unix(0, since)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the entries", ErrBadPending, len(rest))
	}
	return out, nil
}

// readPending reads the record at key: empty when there is none; a record
// that does not decode reads as empty with its error in bad.
func readPending(ctx context.Context, st staging.Store, key string) (p pending, bad error, err error) {
	b, _, err := staging.GetLimited(ctx, st, key, MaxPendingBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return pending{}, nil, nil
	}
	if err != nil {
		if errors.Is(err, staging.ErrTooLarge) {
			return pending{}, fmt.Errorf("%w: %v", ErrBadPending, err), nil
		}
		return nil, nil, fmt.Errorf("read pending record %s: %w", key, err)
	}
	m, derr := DecodePending(b)
	if derr != nil {
		return pending{}, fmt.Errorf("%s: %w", key, derr), nil
	}
	return m, nil, nil
}

// writePending stores p at key, or deletes the record when p is empty.
func writePending(ctx context.Context, st staging.Store, key string, p pending) error {
	if len(p) == 0 {
		if err := st.Delete(ctx, key); err != nil {
			return fmt.Errorf("delete pending record %s: %w", key, err)
		}
		return nil
	}
	if _, err := st.Put(ctx, key, EncodePending(p), staging.PutOptions{}); err != nil {
		return fmt.Errorf("store pending record %s: %w", key, err)
	}
	return nil
}

// since returns when name was first found unreferenced: as recorded, or now.
func (p pending) since(name string, now time.Time) time.Time {
	if t, ok := p[name]; ok && !t.After(now) {
		return t
	}
	return now
}
