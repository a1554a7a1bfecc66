package segment

import (
	"fmt"
)

// Format is the block-pointer format of a file, chosen when the file is created
// and recorded in every inode. These constants are part of the format.
type Format uint8

const (
	// FormatParted writes each object whole, header first: at the flush, in
	// parts when it is larger than segment_max_object_bytes, or sent ahead
	// once an object's blocks are all known.
	FormatParted Format = 1
	// FormatStream lays every object out tail first so that data can be sent
	// while it is written.
	FormatStream Format = 2
)

func (f Format) String() string {
	switch f {
	case FormatParted:
		return "parted"
	case FormatStream:
		return "stream"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// MaxObjectBytes is the most one object can hold: a pointer addresses at most
// 1 GiB inside one object.
const MaxObjectBytes = 1 << 30

// ObjectName names one object of a file: checkpoint number and part. Part 0 is
// the checkpoint itself (it holds the inode); parts 1.. hold data sent ahead or
// the rest of a large checkpoint. The key is "<cno>.<part>" under the file's
// prefix, cno in decimal zero-padded to 10 digits so that keys sort by cno.
type ObjectName struct {
	Cno  uint64
	Part uint32
}

// Ptr addresses a block inside an object: a data block (Slot is its index among
// the object's data blocks) or an index node (Slot is its index among the meta
// blocks). The zero Ptr means "no block" (a hole): checkpoint numbers start at 1.
//
// On objects a Ptr is 16 bytes, little-endian:
//
//	+--------+------+------+
//	| cno u64|part  |slot  |
//	|        | u32  | u32  |
//	+--------+------+------+
type Ptr struct {
	Cno  uint64
	Part uint32
	Slot uint32
}

// IsZero reports whether p is the hole pointer.
func (p Ptr) IsZero() bool { return p == Ptr{} }

// Object is the object p points into.
func (p Ptr) Object() ObjectName { return ObjectName{Cno: p.Cno, Part: p.Part} }

func (p Ptr) String() string {
	return fmt.Sprintf("%d.%d#%d", p.Cno, p.Part, p.Slot)
}

// Inode is the head of one checkpoint of a file: everything needed to read the
// file at that checkpoint. Part 0's header carries it (and the inode the
// checkpoint was built on); the head object "inode" of a file holds the latest
// one. Its byte encoding is in header.go.
type Inode struct {
	Cno           uint64 // checkpoint number; 0 = the empty file before any checkpoint
	Size          uint64 // file size in bytes
	Format        Format
	Height        uint8  // block-map height: 0 = empty map, 1 = root is a leaf
	DataBlockSize uint32 // bytes per data block, fixed for the file's life
	MetaBlockSize uint32 // bytes per index node
	Root          Ptr    // root index node; zero when Height == 0
	Parts         uint32 // highest part number this checkpoint's objects use, plus one
	MtimeNs       int64  // modification time, Unix nanoseconds
	// Lineage is the checkpoint whose lineage object names the files some
	// of this map's objects belong to (a copy by reference; lineage.go);
	// 0: every object is the file's own.
	Lineage uint64
}
