package segment

import (
	"fmt"
)

// StreamBuilder fills one StreamSegment piece by piece. Data goes first and a
// block's offset is final the moment it is placed (slot × DataBlockSize), so
// pieces can be uploaded while the object is still being filled; Tail then
// gives the last piece: meta blocks, summary and header.
//
// A StreamBuilder is not safe for concurrent use: its owner (the open object
// of a file) serialises calls.
type StreamBuilder struct {
	name    ObjectName
	fileTag uint64
	dbs     uint32
	mbs     uint32
	summary []SummaryEntry
	dead    uint32
}

// NewStreamBuilder starts the stream object name of the file tagged fileTag.
func NewStreamBuilder(name ObjectName, fileTag uint64, dataBlockSize, metaBlockSize uint32) (*StreamBuilder, error) {
	l := Layout{Format: FormatStream, DataBlockSize: dataBlockSize, MetaBlockSize: metaBlockSize}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("start stream object %s: %w", name, err)
	}
	if name.Cno == 0 {
		return nil, fmt.Errorf("start stream object %s: %w: checkpoint number 0", name, ErrInvalid)
	}
	return &StreamBuilder{name: name, fileTag: fileTag, dbs: dataBlockSize, mbs: metaBlockSize}, nil
}

// Name is the object being built.
func (b *StreamBuilder) Name() ObjectName { return b.name }

// Place records the next data block, file block fbn whose bytes have CRC-32C
// crc, and returns its slot. The caller copies the bytes to offset
// slot × DataBlockSize of the object; check room with TailSize first.
func (b *StreamBuilder) Place(fbn uint64, crc uint32) (slot uint32) {
	slot = uint32(len(b.summary))
	b.summary = append(b.summary, SummaryEntry{FBN: fbn, CRC: crc})
	return slot
}

// MarkDead records that the block in slot was written again after it was
// placed: its bytes here are not the file's. Marking a dead slot again is a
// no-op.
func (b *StreamBuilder) MarkDead(slot uint32) error {
	if int(slot) >= len(b.summary) {
		return fmt.Errorf("mark slot %d of %s dead: %w: %d slots placed", slot, b.name, ErrInvalid, len(b.summary))
	}
	if !b.summary[slot].Dead {
		b.summary[slot].Dead = true
		b.dead++
	}
	return nil
}

// Entry is the summary entry of slot (ok false when not placed).
func (b *StreamBuilder) Entry(slot uint32) (e SummaryEntry, ok bool) {
	if int(slot) >= len(b.summary) {
		return SummaryEntry{}, false
	}
	return b.summary[slot], true
}

// DataBlocks is the number of slots placed.
func (b *StreamBuilder) DataBlocks() uint32 { return uint32(len(b.summary)) }

// DeadBlocks is the number of slots marked dead.
func (b *StreamBuilder) DeadBlocks() uint32 { return b.dead }

// DataBytes is the length of the data placed so far: where the tail starts.
func (b *StreamBuilder) DataBytes() int64 { return int64(len(b.summary)) * int64(b.dbs) }

// TailSize is what Tail will add with metaBlocks meta blocks:
// metaBlocks × MetaBlockSize + DataBlocks × 16 + 256.
func (b *StreamBuilder) TailSize(metaBlocks int) int64 {
	return int64(metaBlocks)*int64(b.mbs) + int64(len(b.summary))*SummaryEntrySize + HeaderSize
}

// Size is the object's length once closed with metaBlocks meta blocks.
func (b *StreamBuilder) Size(metaBlocks int) int64 { return b.DataBytes() + b.TailSize(metaBlocks) }

// Layout is the object's layout once closed with metaBlocks meta blocks.
func (b *StreamBuilder) Layout(metaBlocks uint32) Layout {
	return Layout{Format: FormatStream, DataBlockSize: b.dbs, MetaBlockSize: b.mbs,
		DataBlocks: uint32(len(b.summary)), MetaBlocks: metaBlocks}
}

// Header is the header the object would have closed now with metaBlocks meta
// blocks, base and inode (both nil except for part 0).
func (b *StreamBuilder) Header(base, inode *Inode, metaBlocks uint32) (Header, error) {
	return NewHeader(b.name, b.fileTag, b.Layout(metaBlocks), base, inode)
}

// Tail returns the last piece of the object: [meta blocks][summary][header],
// each of metas exactly MetaBlockSize bytes. The object is then the data
// placed (DataBytes bytes) followed by the tail. Tail does not change the
// builder; an object over MaxObjectBytes is refused.
func (b *StreamBuilder) Tail(base, inode *Inode, metas [][]byte) ([]byte, error) {
	h, err := b.Header(base, inode, uint32(len(metas)))
	if err != nil {
		return nil, err
	}
	start := h.MetaOffset(0)
	buf := make([]byte, h.Size()-start)
	if err := h.writeTail(buf, start, b.summary, metas); err != nil {
		return nil, err
	}
	return buf, nil
}

// Seal writes everything but the data into obj, a buffer of exactly h.Size()
// bytes whose data slots the caller has filled at h.DataOffset(slot): the
// meta blocks (each exactly MetaBlockSize), the summary (one entry per data
// block) and the header. It is how a PartedSegment is made in one buffer:
//
//	h, err := segment.NewHeader(name, tag, layout, base, inode)
//	obj := make([]byte, h.Size())
//	copy(obj[h.DataOffset(slot):], block) // for every block
//	err = h.Seal(obj, summary, metas)
//
// It works for either layout.
func (h Header) Seal(obj []byte, summary []SummaryEntry, metas [][]byte) error {
	if int64(len(obj)) != h.Size() {
		return fmt.Errorf("seal %s: %w: buffer of %d bytes, object is %d", h.Name, ErrSize, len(obj), h.Size())
	}
	return h.writeTail(obj, 0, summary, metas)
}

// writeTail writes the meta blocks, summary and header of h into dst, which
// holds the object's bytes from offset start to its end.
func (h Header) writeTail(dst []byte, start int64, summary []SummaryEntry, metas [][]byte) error {
	if err := h.validate(); err != nil {
		return fmt.Errorf("seal %s: %w", h.Name, err)
	}
	if len(summary) != int(h.DataBlocks) {
		return fmt.Errorf("seal %s: %w: %d summary entries for %d data blocks", h.Name, ErrSize, len(summary), h.DataBlocks)
	}
	if len(metas) != int(h.MetaBlocks) {
		return fmt.Errorf("seal %s: %w: %d meta blocks, header counts %d", h.Name, ErrSize, len(metas), h.MetaBlocks)
	}
	for i, m := range metas {
		if len(m) != int(h.MetaBlockSize) {
			return fmt.Errorf("seal %s: %w: meta block %d is %d bytes, want %d", h.Name, ErrSize, i, len(m), h.MetaBlockSize)
		}
	}
	for i, m := range metas {
		copy(dst[h.MetaOffset(uint32(i))-start:], m)
	}
	putSummary(dst[h.SummaryOffset()-start:], summary)
	return putHeader(dst[h.HeaderOffset()-start:], h)
}

// EncodeParted returns a whole PartedSegment: data holds the data blocks in
// slot order (len(summary) × dataBlockSize bytes). It copies data once; for
// large objects fill one buffer with Header.Seal instead.
func EncodeParted(name ObjectName, fileTag uint64, dataBlockSize, metaBlockSize uint32,
	base, inode *Inode, data []byte, summary []SummaryEntry, metas [][]byte) ([]byte, error) {
	l := Layout{Format: FormatParted, DataBlockSize: dataBlockSize, MetaBlockSize: metaBlockSize,
		DataBlocks: uint32(len(summary)), MetaBlocks: uint32(len(metas))}
	h, err := NewHeader(name, fileTag, l, base, inode)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != h.DataBytes() {
		return nil, fmt.Errorf("encode %s: %w: %d data bytes for %d blocks of %d", name, ErrSize, len(data), len(summary), dataBlockSize)
	}
	obj := make([]byte, h.Size())
	copy(obj[h.DataOffset(0):], data)
	if err := h.Seal(obj, summary, metas); err != nil {
		return nil, err
	}
	return obj, nil
}
