package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/zeebo/xxh3"
)

// Sizes and limits. These constants are part of the format.
const (
	// LayoutVersion is the newest segment layout this build writes and reads:
	// 2 is 1 with an inode that names a lineage (a copy by reference),
	// written exactly then.
	LayoutVersion = 2
	// HeadVersion is the newest head-object layout this build writes and reads:
	// 3 is 2 whose inode names a lineage (a copy by reference), written only
	// then, so that a build that reads no lineage says the head is newer
	// than it instead of corrupt; 4 is 2 or 3 with a nonce (Head.Nonce),
	// written only then.
	HeadVersion = 4

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
//	 56   8  lineage: the cno whose lineage object names the files some
//	         objects belong to (lineage.go); 0: all are the file's own
//	 64  16  reserved, zero
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
	le.PutUint64(b[56:], in.Lineage)
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
		Lineage:       le.Uint64(b[56:]),
	}
	if !allZero(b[18:20]) || !allZero(b[64:80]) {
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
	case in.Lineage > in.Cno:
		return corrupt(ErrInvalid, "has an inode of checkpoint %d whose lineage was made by a later checkpoint %d", in.Cno, in.Lineage)
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
// little-endian, followed in version 2 by an optional embedded copy of the
// checkpoint's part 0. These offsets are part of the format.
//
//	off size field
//	  0   8  magic "CKPTHEAD"
//	  8   2  head version: 1, 2, 3 (as 2, and the inode names a lineage:
//	         written exactly when it does), or 4 (as 2 or 3, with a nonce:
//	         written exactly when there is one)
//	 10   1  format (1 parted, 2 stream); equals the inode's
//	 11   1  v4: flags; bit 0: the data block count is unknown (bytes
//	         104..111 zero), as in a version 1 head. Otherwise reserved, zero
//	 12   4  v2: e, the length of the embedded part 0 (0: none; at most
//	         MaxEmbedBytes). v1: reserved, zero
//	 16   8  file tag (xxh3 64 of the file's id)
//	 24  80  inode of the latest checkpoint (cno 0: no checkpoint yet)
//	104   8  v2: data blocks the checkpoint stores (mapped in its block map).
//	         v1: reserved, zero (the count is unknown)
//	112   4  v2: CRC-32C of the embedded bytes (zero when e is 0).
//	         v1: reserved, zero
//	116   8  v4: the nonce, not zero. Otherwise reserved, zero
//	124   4  CRC-32C of bytes 0..123
//	128   e  v2: the embedded part 0: exactly the bytes of object <cno>.0, in
//	         the inode's format, with its own header (checked as a part 0 read
//	         from the store is: name, file tag, format, counts), whose inode
//	         is the head's; only for a checkpoint of one object (parts 1)
//
//	+--------------------+----------------------------------------------+
//	| head (128)         | embedded part 0 (e bytes, v2, optional)      |
//	+--------------------+----------------------------------------------+

// headBlocksUnknown is bit 0 of a version 4 head's flags (byte 11): the
// data block count is unknown, as in a version 1 head.
const headBlocksUnknown = 1

// MaxEmbedBytes caps the embedded part 0 of a head (the format's limit; a
// writer chooses its own, smaller or equal): a reader bounds a head object by
// HeadSize + MaxEmbedBytes before it allocates.
const MaxEmbedBytes = 128 << 10

// MaxHeadObjectBytes is the largest head object a reader accepts.
const MaxHeadObjectBytes = HeadSize + MaxEmbedBytes

// Head is the content of a file's head object.
type Head struct {
	FileTag uint64
	Inode   Inode // valid; its Format is the head's format
	// BlocksKnown says the head records Blocks: the data blocks the
	// checkpoint stores. A version 1 head does not; it is written as
	// version 1 only when BlocksKnown is false and there is no Embed.
	BlocksKnown bool
	Blocks      uint64
	// Embed is the checkpoint's part 0 carried in the head (nil: none).
	Embed []byte
	// Part0 is Embed's header, set by DecodeHead when there is an Embed
	// (EncodeHead ignores it).
	Part0 Header
	// Nonce, when not zero, makes these bytes differ from every other head
	// of the same checkpoint. A head rewritten with only its metadata
	// changed (the write-ahead log's mark) would otherwise have the same
	// bytes, and on S3 the same ETag (an MD5 of the bytes): a writer whose
	// If-Match names the head it read would replace the rewrite unseen.
	// It means nothing else; a head with one is written as version 4.
	Nonce uint64
}

// EncodeHead returns the bytes of h, refusing an invalid inode or embed.
func EncodeHead(h Head) ([]byte, error) {
	if err := ValidateInode(h.Inode); err != nil {
		return nil, err
	}
	if len(h.Embed) > MaxEmbedBytes {
		return nil, corrupt(ErrSize, "would embed a part 0 of %d bytes, over the %d a head may carry", len(h.Embed), MaxEmbedBytes)
	}
	b := make([]byte, HeadSize+len(h.Embed))
	copy(b, headMagic)
	v := uint16(2)
	switch {
	case h.Nonce != 0:
		v = 4
	case h.Inode.Lineage != 0:
		v = 3
	case !h.BlocksKnown && len(h.Embed) == 0:
		v = 1
	}
	le.PutUint16(b[8:], v)
	b[10] = byte(h.Inode.Format)
	le.PutUint64(b[16:], h.FileTag)
	EncodeInode(b[24:], h.Inode)
	if v >= 2 {
		le.PutUint32(b[12:], uint32(len(h.Embed)))
		if h.BlocksKnown || v < 4 {
			le.PutUint64(b[104:], h.Blocks)
		}
		if len(h.Embed) > 0 {
			le.PutUint32(b[112:], Checksum(h.Embed))
		}
	}
	if v == 4 {
		if !h.BlocksKnown {
			b[11] = headBlocksUnknown
		}
		le.PutUint64(b[116:], h.Nonce)
	}
	le.PutUint32(b[124:], Checksum(b[:124]))
	copy(b[HeadSize:], h.Embed)
	if len(h.Embed) > 0 {
		// Never write what a reader refuses.
		if _, err := checkEmbed(h.FileTag, h.Inode, h.Embed); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// DecodeHead parses a head object. Refusals are *CorruptError (ErrSize,
// ErrBadMagic, ErrChecksum, ErrInvalid, ErrFormat, ErrWrongObject) or
// *UnsupportedError. An embedded part 0 that is not exactly the checkpoint's
// part 0 makes the head corrupt.
func DecodeHead(b []byte) (Head, error) {
	if len(b) < HeadSize || len(b) > MaxHeadObjectBytes {
		return Head{}, corrupt(ErrSize, "is %d bytes, a head object is %d to %d", len(b), HeadSize, MaxHeadObjectBytes)
	}
	if string(b[:8]) != headMagic {
		return Head{}, corrupt(ErrBadMagic, "has bad magic %q, want %q", b[:8], headMagic)
	}
	v := le.Uint16(b[8:])
	if v > HeadVersion {
		return Head{}, &UnsupportedError{What: "head version", Version: v, Supported: HeadVersion}
	} else if v == 0 {
		return Head{}, corrupt(ErrInvalid, "has head version 0")
	}
	if got, want := le.Uint32(b[124:]), Checksum(b[:124]); got != want {
		return Head{}, corrupt(ErrChecksum, "fails its checksum (stored %#08x, computed %#08x)", got, want)
	}
	embedLen := 0
	if v == 1 {
		if len(b) != HeadSize {
			return Head{}, corrupt(ErrSize, "is %d bytes, a version 1 head object is %d", len(b), HeadSize)
		}
		if b[11] != 0 || !allZero(b[12:16]) || !allZero(b[104:124]) {
			return Head{}, corrupt(ErrInvalid, "has non-zero reserved bytes in its head")
		}
	} else {
		switch {
		case v < 4 && (b[11] != 0 || !allZero(b[116:124])):
			return Head{}, corrupt(ErrInvalid, "has non-zero reserved bytes in its head")
		case v == 4 && b[11]&^headBlocksUnknown != 0:
			return Head{}, corrupt(ErrInvalid, "has unknown head flags %#02x", b[11])
		case v == 4 && allZero(b[116:124]):
			return Head{}, corrupt(ErrInvalid, "is a version 4 head without a nonce")
		case v == 4 && b[11]&headBlocksUnknown != 0 && !allZero(b[104:112]):
			return Head{}, corrupt(ErrInvalid, "counts %d data blocks but says the count is unknown", le.Uint64(b[104:]))
		}
		e := le.Uint32(b[12:])
		if e > MaxEmbedBytes || int64(len(b)) != HeadSize+int64(e) {
			return Head{}, corrupt(ErrSize, "is %d bytes, but its head counts an embedded part 0 of %d", len(b), e)
		}
		embedLen = int(e)
		if embedLen == 0 && le.Uint32(b[112:]) != 0 {
			return Head{}, corrupt(ErrInvalid, "has an embed checksum without an embedded part 0")
		}
	}
	in, err := DecodeInode(b[24:104])
	if err != nil {
		return Head{}, err
	}
	if v < 4 && (in.Lineage != 0) != (v == 3) {
		return Head{}, corrupt(ErrInvalid, "is a version %d head whose inode names lineage %d", v, in.Lineage)
	}
	if in == (Inode{}) {
		return Head{}, corrupt(ErrInvalid, "has a head without an inode")
	}
	if Format(b[10]) != in.Format {
		return Head{}, corrupt(ErrFormat, "has head format %d but an inode of format %v", b[10], in.Format)
	}
	hd := Head{FileTag: le.Uint64(b[16:]), Inode: in}
	if v >= 2 && b[11]&headBlocksUnknown == 0 {
		hd.BlocksKnown = true
		hd.Blocks = le.Uint64(b[104:])
	}
	if v == 4 {
		hd.Nonce = le.Uint64(b[116:])
	}
	if embedLen > 0 {
		embed := b[HeadSize:]
		if got, want := Checksum(embed), le.Uint32(b[112:]); got != want {
			return Head{}, corrupt(ErrChecksum, "has an embedded part 0 failing its checksum (stored %#08x, computed %#08x)", want, got)
		}
		h, err := checkEmbed(hd.FileTag, in, embed)
		if err != nil {
			return Head{}, err
		}
		hd.Embed = embed
		hd.Part0 = h
	}
	return hd, nil
}

// checkEmbed verifies an embedded part 0 as a part 0 read from the store is
// verified (DecodeObject), and that it is the head's checkpoint: its inode
// is the head's, and the checkpoint is this one object.
func checkEmbed(fileTag uint64, in Inode, embed []byte) (Header, error) {
	if in.Cno == 0 || in.Parts != 1 {
		return Header{}, corrupt(ErrInvalid, "embeds a part 0 for checkpoint %d of %d parts (only a one-object checkpoint is embedded)", in.Cno, in.Parts)
	}
	name := ObjectName{Cno: in.Cno, Part: 0}
	h, err := DecodeObject("", embed, name, fileTag, in.Format)
	if err != nil {
		return Header{}, fmt.Errorf("embedded part 0: %w", err)
	}
	if h.Inode != in {
		return Header{}, corrupt(ErrWrongObject, "embeds a part 0 whose inode (checkpoint %d) is not the head's", h.Inode.Cno)
	}
	return h, nil
}

// DecodeObject verifies a whole object held in memory, obj being all of its
// bytes, as a reader verifies one read from the store (ReadHeader's checks:
// the header, the object it names, the file tag, the format f and the
// length), and that its summary decodes. key names it in refusals.
func DecodeObject(key string, obj []byte, want ObjectName, fileTag uint64, f Format) (Header, error) {
	if len(obj) < HeaderSize {
		return Header{}, &CorruptError{Key: key, Err: ErrSize,
			Detail: fmt.Sprintf("is %d bytes, shorter than its %d-byte header", len(obj), HeaderSize)}
	}
	var hb []byte
	switch f {
	case FormatStream:
		hb = obj[len(obj)-HeaderSize:]
	case FormatParted:
		hb = obj[:HeaderSize]
	default:
		return Header{}, fmt.Errorf("decode %s: %w: reader format %v", key, ErrFormat, f)
	}
	h, err := checkHeader(key, hb, int64(len(obj)), want, fileTag, f)
	if err != nil {
		return Header{}, err
	}
	if _, err := DecodeSummary(obj[h.SummaryOffset() : h.SummaryOffset()+h.SummaryBytes()]); err != nil {
		return Header{}, withKey(err, key)
	}
	return h, nil
}
