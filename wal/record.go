package wal

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/ckptfs/ckptfs/segment"
)

// Names under a file's prefix.
const (
	Dir       = "wal/"  // records and the lease live under prefix+Dir
	OwnerName = "owner" // the lease object: prefix+Dir+OwnerName
)

// seqDigits is the width of a record name: every uint64 fits.
const seqDigits = 20

// Record layout constants; part of the format (see the package doc).
const (
	Magic        = "CKPTWAL1"
	Version      = 1
	HeaderSize   = 32
	OpHeaderSize = 32
	TrailerSize  = 4
	MaxOffset    = int64(1) << 60 // off+len of every op is at most this
	// MaxRecordSize bounds a record, header to trailer: a reader refuses a
	// larger object before reading its body, and Append refuses ops that
	// would make one (BatchBytes is at most this).
	MaxRecordSize = 32 << 20
	emptyRecord   = HeaderSize + TrailerSize
	hdrVersion    = 8
	hdrReserved   = 10
	hdrCount      = 12
	hdrTag        = 16
	hdrSeq        = 24
	opKind        = 0
	opReserved    = 1
	opOff         = 8
	opLen         = 16
	opMtime       = 24
	opReservedLen = opOff - opReserved
)

var le = binary.LittleEndian

// RecordKey is the key of record seq of the file under prefix.
func RecordKey(prefix string, seq uint64) string {
	return prefix + Dir + fmt.Sprintf("%0*d", seqDigits, seq)
}

// ParseRecordName parses the part of a key after prefix+Dir; ok is false for
// anything but a record name (the owner object, a stray object).
func ParseRecordName(name string) (seq uint64, ok bool) {
	if len(name) != seqDigits {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(name, 10, 64)
	if err != nil || seq == 0 { // no record has seq 0
		return 0, false
	}
	return seq, true
}

// OpKind is what an op does to the file.
type OpKind uint8

// Op kinds; part of the format.
const (
	OpWrite    OpKind = 1 // Data at Off
	OpTruncate OpKind = 2 // size becomes Off
	OpZero     OpKind = 3 // [Off, Off+Len) reads as zeros, size unchanged
	OpMtime    OpKind = 4 // only sets the mtime
)

func (k OpKind) String() string {
	switch k {
	case OpWrite:
		return "write"
	case OpTruncate:
		return "truncate"
	case OpZero:
		return "zero"
	case OpMtime:
		return "mtime"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one change to the file.
type Op struct {
	Kind    OpKind
	Off     int64
	Len     int64  // OpZero: length; OpWrite: must equal len(Data) (Encode sets it from Data)
	Data    []byte // OpWrite only
	MtimeNs int64  // the mtime the file has after this op
}

// Record is the content of one WAL object.
type Record struct {
	Seq uint64
	Ops []Op
}

// opSize is the encoded size of one op.
func opSize(op Op) int {
	if op.Kind == OpWrite {
		return OpHeaderSize + len(op.Data)
	}
	return OpHeaderSize
}

// EncodedSize is the size Encode gives to a record holding ops.
func EncodedSize(ops []Op) int {
	n := emptyRecord
	for _, op := range ops {
		n += opSize(op)
	}
	return n
}

// Encode lays out r. It writes only the fields an op's kind uses (Len from
// Data for OpWrite, zero where the format says zero), so what it writes always
// decodes; Append refuses ops whose other fields are set (see checkOp).
func Encode(tag uint64, r Record) []byte {
	b := make([]byte, EncodedSize(r.Ops))
	copy(b, Magic)
	le.PutUint16(b[hdrVersion:], Version)
	le.PutUint32(b[hdrCount:], uint32(len(r.Ops)))
	le.PutUint64(b[hdrTag:], tag)
	le.PutUint64(b[hdrSeq:], r.Seq)
	p := HeaderSize
	for _, op := range r.Ops {
		h := b[p : p+OpHeaderSize]
		h[opKind] = byte(op.Kind)
		var off, n int64
		switch op.Kind {
		case OpWrite:
			off, n = op.Off, int64(len(op.Data))
		case OpZero:
			off, n = op.Off, op.Len
		case OpTruncate:
			off = op.Off
		}
		le.PutUint64(h[opOff:], uint64(off))
		le.PutUint64(h[opLen:], uint64(n))
		le.PutUint64(h[opMtime:], uint64(op.MtimeNs))
		p += OpHeaderSize
		if op.Kind == OpWrite {
			p += copy(b[p:], op.Data)
		}
	}
	le.PutUint32(b[p:], segment.Checksum(b[:p]))
	return b
}

// checkOp says what is wrong with an op, or "" when it is one the format
// holds. Decode and Append share it, so nothing Append accepts fails to decode.
func checkOp(op Op, dataLen int64) string {
	if op.Off < 0 || op.Len < 0 {
		return fmt.Sprintf("%s off %d len %d: negative", op.Kind, op.Off, op.Len)
	}
	if op.Off > MaxOffset || op.Len > MaxOffset-op.Off {
		return fmt.Sprintf("%s off %d len %d: past %d", op.Kind, op.Off, op.Len, MaxOffset)
	}
	switch op.Kind {
	case OpWrite:
		if op.Len != dataLen {
			return fmt.Sprintf("write of len %d with %d data bytes", op.Len, dataLen)
		}
	case OpZero:
		if dataLen != 0 {
			return "zero op with data"
		}
	case OpTruncate:
		if op.Len != 0 || dataLen != 0 {
			return fmt.Sprintf("truncate with len %d and %d data bytes", op.Len, dataLen)
		}
	case OpMtime:
		if op.Off != 0 || op.Len != 0 || dataLen != 0 {
			return fmt.Sprintf("mtime op with off %d, len %d and %d data bytes", op.Off, op.Len, dataLen)
		}
	default:
		return fmt.Sprintf("unknown op kind %d", uint8(op.Kind))
	}
	return ""
}

// Decode checks every byte of a record read from key (magic, version, tag,
// seq against the key's seq, lengths, reserved bytes, op kinds and ranges,
// CRC) and returns it, or a *CorruptError naming key and what is wrong.
// Decoded Data aliases b.
func Decode(key string, seq uint64, tag uint64, b []byte) (Record, error) {
	bad := func(format string, args ...any) (Record, error) {
		return Record{}, &CorruptError{Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	// Every strict prefix of a record fails one of these length checks.
	short := func(format string, args ...any) (Record, error) {
		return Record{}, &CorruptError{Key: key, Reason: fmt.Sprintf(format, args...), Truncated: true}
	}
	if len(b) > MaxRecordSize {
		return bad("%d bytes, a record has at most %d", len(b), MaxRecordSize)
	}
	if len(b) < emptyRecord {
		return short("truncated: %d bytes, a record has at least %d", len(b), emptyRecord)
	}
	if string(b[:len(Magic)]) != Magic {
		return bad("bad magic %q", b[:len(Magic)])
	}
	if v := le.Uint16(b[hdrVersion:]); v != Version {
		return bad("version %d, this build reads %d", v, Version)
	}
	if r := le.Uint16(b[hdrReserved:]); r != 0 {
		return bad("reserved header bytes %#04x, not zero", r)
	}
	if t := le.Uint64(b[hdrTag:]); t != tag {
		return bad("file tag %#016x, the file's is %#016x (a record of another file)", t, tag)
	}
	if s := le.Uint64(b[hdrSeq:]); s != seq {
		return bad("seq %d in a record named %d", s, seq)
	}
	body := len(b) - TrailerSize
	count := le.Uint32(b[hdrCount:])
	// Every op takes at least its header: refuse a count the bytes cannot
	// hold before allocating for it.
	if uint64(count)*OpHeaderSize > uint64(body-HeaderSize) {
		return short("truncated: %d ops do not fit in %d bytes", count, len(b))
	}
	r := Record{Seq: seq, Ops: make([]Op, 0, count)}
	p := HeaderSize
	for i := range count {
		if body-p < OpHeaderSize {
			return short("truncated: op %d of %d at byte %d past the end", i, count, p)
		}
		h := b[p : p+OpHeaderSize]
		for _, c := range h[opReserved : opReserved+opReservedLen] {
			if c != 0 {
				return bad("op %d: reserved bytes not zero", i)
			}
		}
		op := Op{
			Kind:    OpKind(h[opKind]),
			Off:     int64(le.Uint64(h[opOff:])),
			Len:     int64(le.Uint64(h[opLen:])),
			MtimeNs: int64(le.Uint64(h[opMtime:])),
		}
		p += OpHeaderSize
		var dataLen int64
		if op.Kind == OpWrite {
			if op.Len < 0 {
				return bad("op %d writes %d bytes", i, op.Len)
			}
			if op.Len > int64(body-p) {
				return short("truncated: op %d writes %d bytes, %d left", i, op.Len, body-p)
			}
			dataLen = op.Len
			op.Data = b[p : p+int(op.Len) : p+int(op.Len)]
			p += int(op.Len)
		}
		if why := checkOp(op, dataLen); why != "" {
			return bad("op %d: %s", i, why)
		}
		r.Ops = append(r.Ops, op)
	}
	if p != body {
		return bad("%d bytes after the last op", body-p)
	}
	if got, want := le.Uint32(b[body:]), segment.Checksum(b[:body]); got != want {
		return bad("checksum %#08x, the bytes give %#08x", got, want)
	}
	return r, nil
}
