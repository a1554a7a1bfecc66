package segment

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"

	"github.com/zeebo/xxh3"
)

// Sizes and limits. These constants are part of the format.
const (
	// LayoutVersion is the newest segment layout this build writes and reads.
	LayoutVersion = 1
	// HeadVersion is the newest head-object layout this build writes and reads.
	HeadVersion = 1

	HeaderSize       = 256 // bytes of a segment header
	InodeSize        = 80  // bytes of an encoded Inode
	PtrSize          = 16  // bytes of an encoded Ptr
	SummaryEntrySize = 16  // bytes of one summary entry
	HeadSize         = 128 // bytes of the head object

	// MaxHeight is the tallest block map an inode may describe.
	MaxHeight = 32

	// Data and meta block sizes are powers of two in these ranges.
	MinDataBlockSize = 512
	MaxDataBlockSize = 16 << 20
	MinMetaBlockSize = 256
	MaxMetaBlockSize = 1 << 20
)

const (
	headerMagic = "CKPTSEG1"
	headMagic   = "CKPTHEAD"

	// FlagInode marks a header that carries the checkpoint's inode: part 0.
	FlagInode  = 1 << 0
	knownFlags = FlagInode

	// summaryDead marks a dead slot in a summary entry's flags.
	summaryDead  = 1 << 0
	knownSummary = summaryDead
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C (Castagnoli) of data: the checksum of headers, head
// objects, summaries' blocks and index nodes.
func Checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli) }

// FileTag is the tag every object of the file with this id carries: an object
// copied under another file's prefix is refused because its tag differs.
func FileTag(id string) uint64 { return xxh3.HashString(id) }

var le = binary.LittleEndian

// ---------------------------------------------------------------------------
// Ptr

// EncodePtr writes p into b[:PtrSize]: cno u64 | part u32 | slot u32.
func EncodePtr(b []byte, p Ptr) {
	_ = b[PtrSize-1]
	le.PutUint64(b[0:], p.Cno)
	le.PutUint32(b[8:], p.Part)
	le.PutUint32(b[12:], p.Slot)
}

// DecodePtr reads a Ptr from b[:PtrSize].
func DecodePtr(b []byte) Ptr {
	_ = b[PtrSize-1]
	return Ptr{Cno: le.Uint64(b[0:]), Part: le.Uint32(b[8:]), Slot: le.Uint32(b[12:])}
}

// ---------------------------------------------------------------------------
// Inode
//
// An inode is 80 bytes, little-endian. These offsets are part of the format.
//
//	off size field
//	  0   8  cno
//	  8   8  size (bytes)
//	 16   1  format (1 parted, 2 stream)
//	 17   1  height of the block map (0 = empty)
//	 18   2  reserved, zero
//	 20   4  data block size
//	 24   4  meta block size
//	 28   4  parts
//	 32  16  root Ptr (cno u64, part u32, slot u32)
//	 48   8  mtime, Unix nanoseconds (int64)
//	 56  24  reserved, zero
//
// Eighty zero bytes are "no inode" (the zero Inode); any other inode must be
// valid.

// EncodeInode writes in into b[:InodeSize]. It does not validate: encode
// through NewHeader or EncodeHead to be refused an impossible inode.
func EncodeInode(b []byte, in Inode) {
	_ = b[InodeSize-1]
	clear(b[:InodeSize])
	le.PutUint64(b[0:], in.Cno)
	le.PutUint64(b[8:], in.Size)
	b[16] = byte(in.Format)
	b[17] = in.Height
	le.PutUint32(b[20:], in.DataBlockSize)
	le.PutUint32(b[24:], in.MetaBlockSize)
	le.PutUint32(b[28:], in.Parts)
	EncodePtr(b[32:], in.Root)
	le.PutUint64(b[48:], uint64(in.MtimeNs))
}

// DecodeInode reads an inode from b, which must be InodeSize bytes. All zero
// bytes decode to the zero Inode; anything else must be a valid inode.
func DecodeInode(b []byte) (Inode, error) {
	if len(b) != InodeSize {
		return Inode{}, corrupt(ErrSize, "has an inode of %d bytes, want %d", len(b), InodeSize)
	}
	in := Inode{
		Cno:           le.Uint64(b[0:]),
		Size:          le.Uint64(b[8:]),
		Format:        Format(b[16]),
		Height:        b[17],
		DataBlockSize: le.Uint32(b[20:]),
		MetaBlockSize: le.Uint32(b[24:]),
		Parts:         le.Uint32(b[28:]),
		Root:          DecodePtr(b[32:]),
		MtimeNs:       int64(le.Uint64(b[48:])),
	}
	if !allZero(b[18:20]) || !allZero(b[56:80]) {
		return Inode{}, corrupt(ErrInvalid, "has non-zero reserved bytes in an inode")
	}
	if in == (Inode{}) {
		return in, nil
	}
	if err := ValidateInode(in); err != nil {
		return Inode{}, err
	}
	return in, nil
}

// ValidateInode refuses an inode no writer produces. The zero Inode is
// refused too: it stands for "no inode" and is never a file's inode.
func ValidateInode(in Inode) error {
	switch {
	case in.Format != FormatParted && in.Format != FormatStream:
		return corrupt(ErrInvalid, "has an inode of unknown format %d", uint8(in.Format))
	case !validSize(in.DataBlockSize, MinDataBlockSize, MaxDataBlockSize):
		return corrupt(ErrInvalid, "has an inode with data block size %d (want a power of two in %d..%d)",
			in.DataBlockSize, MinDataBlockSize, MaxDataBlockSize)
	case !validSize(in.MetaBlockSize, MinMetaBlockSize, MaxMetaBlockSize):
		return corrupt(ErrInvalid, "has an inode with meta block size %d (want a power of two in %d..%d)",
			in.MetaBlockSize, MinMetaBlockSize, MaxMetaBlockSize)
	case in.Height > MaxHeight:
		return corrupt(ErrInvalid, "has an inode of height %d (at most %d)", in.Height, MaxHeight)
	case in.Height == 0 && !in.Root.IsZero():
		return corrupt(ErrInvalid, "has an inode of height 0 with root %v", in.Root)
	case in.Height > 0 && in.Root.Cno == 0:
		return corrupt(ErrInvalid, "has an inode of height %d with root %v (no checkpoint)", in.Height, in.Root)
	case in.Root.Cno > in.Cno:
		return corrupt(ErrInvalid, "has an inode of checkpoint %d whose root %v is in a later checkpoint", in.Cno, in.Root)
	}
	return nil
}

func validSize(v, lo, hi uint32) bool {
	return v >= lo && v <= hi && bits.OnesCount32(v) == 1
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Summary
//
// The summary lists an object's data blocks in slot order, 16 bytes each,
// little-endian. These offsets are part of the format.
//
//	off size field
//	  0   8  fbn: the file block number the slot holds
//	  8   4  CRC-32C of the block's bytes as placed
//	 12   4  flags; bit 0: dead slot (the block was written again after it was
//	         placed; its bytes here are not the file's). Other bits zero.

// SummaryEntry describes one data slot of an object.
type SummaryEntry struct {
	FBN  uint64
	CRC  uint32
	Dead bool
}

// EncodeSummary returns the encoding of entries.
func EncodeSummary(entries []SummaryEntry) []byte {
	b := make([]byte, len(entries)*SummaryEntrySize)
	putSummary(b, entries)
	return b
}

func putSummary(b []byte, entries []SummaryEntry) {
	for i, e := range entries {
		p := b[i*SummaryEntrySize:]
		le.PutUint64(p[0:], e.FBN)
		le.PutUint32(p[8:], e.CRC)
		var flags uint32
		if e.Dead {
			flags |= summaryDead
		}
		le.PutUint32(p[12:], flags)
	}
}

// DecodeSummary reads a summary: len(b) must be a multiple of
// SummaryEntrySize and every entry's unknown flag bits zero.
func DecodeSummary(b []byte) ([]SummaryEntry, error) {
	if len(b)%SummaryEntrySize != 0 {
		return nil, corrupt(ErrSize, "has a summary of %d bytes, not a multiple of %d", len(b), SummaryEntrySize)
	}
	out := make([]SummaryEntry, len(b)/SummaryEntrySize)
	for i := range out {
		p := b[i*SummaryEntrySize:]
		flags := le.Uint32(p[12:])
		if flags&^knownSummary != 0 {
			return nil, corrupt(ErrInvalid, "has summary entry %d with unknown flags %#x", i, flags)
		}
		out[i] = SummaryEntry{FBN: le.Uint64(p[0:]), CRC: le.Uint32(p[8:]), Dead: flags&summaryDead != 0}
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Head object
//
// A file's head object (its "inode" key, replaced with If-Match) is 128 bytes,
// little-endian. These offsets are part of the format.
//
//	off size field
//	  0   8  magic "CKPTHEAD"
//	  8   2  head version (HeadVersion = 1)
//	 10   1  format (1 parted, 2 stream); equals the inode's
//	 11   1  reserved, zero
//	 12   4  reserved, zero
//	 16   8  file tag (xxh3 64 of the file's id)
//	 24  80  inode of the latest checkpoint (cno 0: no checkpoint yet)
//	104  20  reserved, zero
//	124   4  CRC-32C of bytes 0..123

// Head is the content of a file's head object.
type Head struct {
	FileTag uint64
	Inode   Inode // valid; its Format is the head's format
}

// EncodeHead returns the 128 bytes of h, refusing an invalid inode.
func EncodeHead(h Head) ([]byte, error) {
	if err := ValidateInode(h.Inode); err != nil {
		return nil, err
	}
	b := make([]byte, HeadSize)
	copy(b, headMagic)
	le.PutUint16(b[8:], HeadVersion)
	b[10] = byte(h.Inode.Format)
	le.PutUint64(b[16:], h.FileTag)
	EncodeInode(b[24:], h.Inode)
	le.PutUint32(b[124:], Checksum(b[:124]))
	return b, nil
}

// DecodeHead parses a head object. Refusals are *CorruptError (ErrSize,
// ErrBadMagic, ErrChecksum, ErrInvalid, ErrFormat) or *UnsupportedError.
func DecodeHead(b []byte) (Head, error) {
	if len(b) != HeadSize {
		return Head{}, corrupt(ErrSize, "is %d bytes, a head object is %d", len(b), HeadSize)
	}
	if string(b[:8]) != headMagic {
		return Head{}, corrupt(ErrBadMagic, "has bad magic %q, want %q", b[:8], headMagic)
	}
	if v := le.Uint16(b[8:]); v > HeadVersion {
		return Head{}, &UnsupportedError{What: "head version", Version: v, Supported: HeadVersion}
	} else if v == 0 {
		return Head{}, corrupt(ErrInvalid, "has head version 0")
	}
	if got, want := le.Uint32(b[124:]), Checksum(b[:124]); got != want {
		return Head{}, corrupt(ErrChecksum, "fails its checksum (stored %#08x, computed %#08x)", got, want)
	}
	if b[11] != 0 || !allZero(b[12:16]) || !allZero(b[104:124]) {
		return Head{}, corrupt(ErrInvalid, "has non-zero reserved bytes in its head")
	}
	in, err := DecodeInode(b[24:104])
	if err != nil {
		return Head{}, err
	}
	if in == (Inode{}) {
		return Head{}, corrupt(ErrInvalid, "has a head without an inode")
	}
	if Format(b[10]) != in.Format {
		return Head{}, corrupt(ErrFormat, "has head format %d but an inode of format %v", b[10], in.Format)
	}
	return Head{FileTag: le.Uint64(b[16:]), Inode: in}, nil
}
