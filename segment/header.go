package segment

import (
	"fmt"

	"github.com/ckptfs/ckptfs/staging"
)

// Header and layout of a segment object. The byte diagram of the header is
// in the package documentation; these offsets are part of the format.
const (
	hOffMagic    = 0   // 8  "CKPTSEG1"
	hOffVersion  = 8   // 2  layout version
	hOffFormat   = 10  // 1  format
	hOffFlags    = 11  // 1  flags
	hOffPart     = 12  // 4  part
	hOffCno      = 16  // 8  cno
	hOffDBS      = 24  // 4  data block size
	hOffMBS      = 28  // 4  meta block size
	hOffN        = 32  // 4  data blocks
	hOffM        = 36  // 4  meta blocks
	hOffFileTag  = 40  // 8  file tag
	hOffBase     = 48  // 80 base inode
	hOffInode    = 128 // 80 inode
	hOffReserved = 208 // 44 reserved
	hOffCRC      = 252 // 4  CRC-32C of bytes 0..251
)

// Layout is the shape of one object: where its data blocks, meta blocks,
// summary and header lie. A StreamSegment is
//
//	[data n × DataBlockSize][meta m × MetaBlockSize][summary n × 16][header 256]
//
// and a PartedSegment is
//
//	[header 256][data n × DataBlockSize][meta m × MetaBlockSize][summary n × 16]
//
// Either way the object is exactly Size() bytes.
type Layout struct {
	Format        Format // FormatParted or FormatStream
	DataBlockSize uint32
	MetaBlockSize uint32
	DataBlocks    uint32 // n
	MetaBlocks    uint32 // m
}

// dataStart is where slot 0 lies.
func (l Layout) dataStart() int64 {
	if l.Format == FormatParted {
		return HeaderSize
	}
	return 0
}

// DataOffset is the offset of data slot slot.
func (l Layout) DataOffset(slot uint32) int64 {
	return l.dataStart() + int64(slot)*int64(l.DataBlockSize)
}

// DataRange is the range of nslots data slots from slot (nslots > 0).
func (l Layout) DataRange(slot, nslots uint32) staging.Range {
	return staging.Bytes(l.DataOffset(slot), int64(nslots)*int64(l.DataBlockSize))
}

// DataBytes is the length of the data region.
func (l Layout) DataBytes() int64 { return int64(l.DataBlocks) * int64(l.DataBlockSize) }

// MetaOffset is the offset of meta block i.
func (l Layout) MetaOffset(i uint32) int64 {
	return l.dataStart() + l.DataBytes() + int64(i)*int64(l.MetaBlockSize)
}

// MetaBytes is the length of the meta region.
func (l Layout) MetaBytes() int64 { return int64(l.MetaBlocks) * int64(l.MetaBlockSize) }

// MetaRange is the meta region. Its length is zero when there are no meta
// blocks: do not Get it then (a zero length means "to the end" to a Store).
func (l Layout) MetaRange() staging.Range {
	return staging.Bytes(l.MetaOffset(0), l.MetaBytes())
}

// SummaryOffset is the offset of the summary.
func (l Layout) SummaryOffset() int64 { return l.MetaOffset(l.MetaBlocks) }

// SummaryBytes is the length of the summary.
func (l Layout) SummaryBytes() int64 { return int64(l.DataBlocks) * SummaryEntrySize }

// SummaryRange is the summary region. Its length is zero when there are no
// data blocks: do not Get it then.
func (l Layout) SummaryRange() staging.Range {
	return staging.Bytes(l.SummaryOffset(), l.SummaryBytes())
}

// HeaderOffset is where the header lies: 0 for parted, the last 256 bytes
// for stream.
func (l Layout) HeaderOffset() int64 {
	if l.Format == FormatParted {
		return 0
	}
	return l.SummaryOffset() + l.SummaryBytes()
}

// Size is the object's length: n×DataBlockSize + m×MetaBlockSize + n×16 + 256.
func (l Layout) Size() int64 {
	return l.DataBytes() + l.MetaBytes() + l.SummaryBytes() + HeaderSize
}

// validate refuses a layout no writer produces.
func (l Layout) validate() error {
	switch {
	case l.Format != FormatParted && l.Format != FormatStream:
		return corrupt(ErrInvalid, "has unknown format %d", uint8(l.Format))
	case !validSize(l.DataBlockSize, MinDataBlockSize, MaxDataBlockSize):
		return corrupt(ErrInvalid, "has data block size %d (want a power of two in %d..%d)",
			l.DataBlockSize, MinDataBlockSize, MaxDataBlockSize)
	case !validSize(l.MetaBlockSize, MinMetaBlockSize, MaxMetaBlockSize):
		return corrupt(ErrInvalid, "has meta block size %d (want a power of two in %d..%d)",
			l.MetaBlockSize, MinMetaBlockSize, MaxMetaBlockSize)
	case l.Size() > MaxObjectBytes:
		return corrupt(ErrSize, "counts %d data and %d meta blocks: %d bytes, over the %d an object may hold",
			l.DataBlocks, l.MetaBlocks, l.Size(), MaxObjectBytes)
	}
	return nil
}

// Header is the decoded header of an object: its layout, the object it names,
// the file it belongs to and, for part 0, the checkpoint's inode and the inode
// it was built on.
type Header struct {
	Layout
	Name    ObjectName
	FileTag uint64
	// Base is the inode the checkpoint was built on; zero for parts other
	// than 0 and for the first checkpoint of a new file.
	Base Inode
	// Inode is the checkpoint's inode; non-zero exactly in part 0 (flag bit 0).
	Inode Inode
}

// HasInode reports whether the header carries the checkpoint's inode.
func (h Header) HasInode() bool { return h.Inode != (Inode{}) }

// NewHeader builds and validates the header of object name. base and inode
// may be nil; part 0 requires inode, other parts refuse both.
func NewHeader(name ObjectName, fileTag uint64, l Layout, base, inode *Inode) (Header, error) {
	h := Header{Layout: l, Name: name, FileTag: fileTag}
	if base != nil {
		h.Base = *base
	}
	if inode != nil {
		h.Inode = *inode
	}
	if err := h.validate(); err != nil {
		return Header{}, fmt.Errorf("build header of %s: %w", name, err)
	}
	return h, nil
}

// validate holds the rules a decoded header must meet besides magic, version
// and CRC; encoding applies the same so that no writer makes what readers
// refuse.
func (h Header) validate() error {
	if err := h.Layout.validate(); err != nil {
		return err
	}
	if h.Name.Cno == 0 {
		return corrupt(ErrInvalid, "has checkpoint number 0 in its header")
	}
	if !h.HasInode() {
		if h.Name.Part == 0 {
			return corrupt(ErrInvalid, "is part 0 but its header carries no inode")
		}
		if h.Base != (Inode{}) {
			return corrupt(ErrInvalid, "is part %d but its header carries a base inode", h.Name.Part)
		}
		return nil
	}
	if h.Name.Part != 0 {
		return corrupt(ErrInvalid, "is part %d but its header carries an inode", h.Name.Part)
	}
	in := h.Inode
	if err := ValidateInode(in); err != nil {
		return err
	}
	switch {
	case in.Cno != h.Name.Cno:
		return corrupt(ErrInvalid, "is checkpoint %d but carries the inode of checkpoint %d", h.Name.Cno, in.Cno)
	case in.Format != h.Format:
		return corrupt(ErrInvalid, "is %v but carries an inode of format %v", h.Format, in.Format)
	case in.DataBlockSize != h.DataBlockSize || in.MetaBlockSize != h.MetaBlockSize:
		return corrupt(ErrInvalid, "has block sizes %d/%d but its inode %d/%d",
			h.DataBlockSize, h.MetaBlockSize, in.DataBlockSize, in.MetaBlockSize)
	case in.Parts == 0:
		return corrupt(ErrInvalid, "carries an inode of 0 parts")
	}
	if h.Base == (Inode{}) {
		return nil
	}
	b := h.Base
	if err := ValidateInode(b); err != nil {
		return err
	}
	switch {
	case b.Cno >= h.Name.Cno:
		return corrupt(ErrInvalid, "is checkpoint %d but was built on checkpoint %d", h.Name.Cno, b.Cno)
	case b.Format != h.Format:
		return corrupt(ErrInvalid, "is %v but was built on an inode of format %v", h.Format, b.Format)
	case b.DataBlockSize != h.DataBlockSize:
		return corrupt(ErrInvalid, "has data block size %d but was built on one of %d", h.DataBlockSize, b.DataBlockSize)
	}
	return nil
}

// EncodeHeader returns the 256 bytes of h, refusing a header readers would
// refuse.
func EncodeHeader(h Header) ([]byte, error) {
	b := make([]byte, HeaderSize)
	if err := putHeader(b, h); err != nil {
		return nil, err
	}
	return b, nil
}

// version is the layout version h is written with: 2 when an inode names a
// lineage (a copy by reference), so that a build that reads no lineage says
// the object is newer than it instead of corrupt; 1 otherwise.
func (h Header) version() uint16 {
	if h.Base.Lineage != 0 || h.Inode.Lineage != 0 {
		return 2
	}
	return 1
}

func putHeader(b []byte, h Header) error {
	if err := h.validate(); err != nil {
		return fmt.Errorf("encode header of %s: %w", h.Name, err)
	}
	b = b[:HeaderSize]
	clear(b)
	copy(b[hOffMagic:], headerMagic)
	le.PutUint16(b[hOffVersion:], h.version())
	b[hOffFormat] = byte(h.Format)
	if h.HasInode() {
		b[hOffFlags] = FlagInode
	}
	le.PutUint32(b[hOffPart:], h.Name.Part)
	le.PutUint64(b[hOffCno:], h.Name.Cno)
	le.PutUint32(b[hOffDBS:], h.DataBlockSize)
	le.PutUint32(b[hOffMBS:], h.MetaBlockSize)
	le.PutUint32(b[hOffN:], h.DataBlocks)
	le.PutUint32(b[hOffM:], h.MetaBlocks)
	le.PutUint64(b[hOffFileTag:], h.FileTag)
	EncodeInode(b[hOffBase:], h.Base)
	EncodeInode(b[hOffInode:], h.Inode)
	le.PutUint32(b[hOffCRC:], Checksum(b[:hOffCRC]))
	return nil
}

// DecodeHeader parses a 256-byte header. It checks, in order: length, magic
// (ErrBadMagic), layout version (*UnsupportedError when newer), CRC
// (ErrChecksum), then every field (ErrInvalid, ErrSize). It does not know
// which object the bytes came from: ReadHeader and DetectHeader check that.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) != HeaderSize {
		return Header{}, corrupt(ErrSize, "has a header of %d bytes, want %d", len(b), HeaderSize)
	}
	if string(b[hOffMagic:hOffMagic+8]) != headerMagic {
		return Header{}, corrupt(ErrBadMagic, "has bad magic %q, want %q", b[hOffMagic:hOffMagic+8], headerMagic)
	}
	if v := le.Uint16(b[hOffVersion:]); v > LayoutVersion {
		return Header{}, &UnsupportedError{What: "layout version", Version: v, Supported: LayoutVersion}
	} else if v == 0 {
		return Header{}, corrupt(ErrInvalid, "has layout version 0")
	}
	if got, want := le.Uint32(b[hOffCRC:]), Checksum(b[:hOffCRC]); got != want {
		return Header{}, corrupt(ErrChecksum, "fails its header checksum (stored %#08x, computed %#08x)", got, want)
	}
	flags := b[hOffFlags]
	if flags&^knownFlags != 0 {
		return Header{}, corrupt(ErrInvalid, "has unknown header flags %#x", flags)
	}
	if !allZero(b[hOffReserved:hOffCRC]) {
		return Header{}, corrupt(ErrInvalid, "has non-zero reserved bytes in its header")
	}
	h := Header{
		Layout: Layout{
			Format:        Format(b[hOffFormat]),
			DataBlockSize: le.Uint32(b[hOffDBS:]),
			MetaBlockSize: le.Uint32(b[hOffMBS:]),
			DataBlocks:    le.Uint32(b[hOffN:]),
			MetaBlocks:    le.Uint32(b[hOffM:]),
		},
		Name:    ObjectName{Cno: le.Uint64(b[hOffCno:]), Part: le.Uint32(b[hOffPart:])},
		FileTag: le.Uint64(b[hOffFileTag:]),
	}
	var err error
	if h.Base, err = DecodeInode(b[hOffBase : hOffBase+InodeSize]); err != nil {
		return Header{}, err
	}
	if h.Inode, err = DecodeInode(b[hOffInode : hOffInode+InodeSize]); err != nil {
		return Header{}, err
	}
	if v := le.Uint16(b[hOffVersion:]); v != h.version() {
		return Header{}, corrupt(ErrInvalid, "is a layout version %d header, but its inodes name lineages %d and %d", v, h.Base.Lineage, h.Inode.Lineage)
	}
	if flags&FlagInode != 0 && !h.HasInode() {
		return Header{}, corrupt(ErrInvalid, "has the inode flag but no inode")
	}
	if flags&FlagInode == 0 && h.HasInode() {
		return Header{}, corrupt(ErrInvalid, "has an inode without the inode flag")
	}
	if err := h.validate(); err != nil {
		return Header{}, err
	}
	return h, nil
}
