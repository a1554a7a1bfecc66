package blockmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/ckptfs/ckptfs/segment"
)

// Node format (one meta block of an object; little-endian). These constants
// are part of the format.
//
//	offset size
//	 0      4   magic "CKBN"
//	 4      1   node format version (1)
//	 5      1   level (0 = leaf)
//	 6      2   entry count
//	 8      4   CRC-32C (Castagnoli) of the whole block with these 4 bytes zero
//	12      4   reserved, zero
//	16     ..   entries, then zero padding to MetaBlockSize
//
//	leaf entry, 32 B:
//	 0  8  fbn
//	 8 16  block pointer: cno u64, part u32, slot u32
//	24  4  CRC-32C of the block's bytes
//	28  4  reserved, zero
//
//	internal entry, 24 B:
//	 0  8  lowest fbn of the child
//	 8 16  child pointer: cno u64, part u32, slot u32
//
// Entries ascend strictly by fbn. In an internal node child i covers
// [lo_i, lo_(i+1)), the last child everything from its lo up, and the first
// child everything below lo_1: lo_0 only records the low end of the node's
// range when it was written (a range can later grow downwards, when the
// child left of it is removed, without the node being rewritten). Every fbn
// is below math.MaxUint64, which stands for "no upper bound". A node is never
// empty, and reserved bytes and padding are zero, so that decoding and
// encoding again gives the same bytes.
const (
	nodeMagic         = "CKBN"
	nodeVersion       = 1
	nodeHeaderSize    = 16
	leafEntrySize     = 32
	internalEntrySize = 24
	crcOffset         = 8

	// MinMetaBlockSize and MaxMetaBlockSize bound the node size; it is a
	// power of two in between.
	MinMetaBlockSize = 256
	MaxMetaBlockSize = 64 << 10
	// MaxHeight bounds the height of a tree (what an inode can record): the
	// level byte of a node is below it. Splits only grow a tree by one level
	// when the root is full, so a real tree never comes near it.
	MaxHeight = segment.MaxHeight
	// noUpperBound is the exclusive upper end of the rightmost range; it is
	// not a valid fbn.
	noUpperBound = math.MaxUint64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptNode is matched (errors.Is) by every error about bytes of a node
// that cannot be a node of this tree; errors.As with *CorruptNodeError tells
// which node and why.
var ErrCorruptNode = errors.New("corrupt block-map node")

// ErrInvalidArgument is matched by errors about a caller's arguments: bad
// Options, an fbn out of range, a zero pointer as a value.
var ErrInvalidArgument = errors.New("invalid argument")

// CorruptNodeError says which node (its Ptr; zero when decoding bytes not yet
// placed) was refused and why.
type CorruptNodeError struct {
	Ref    segment.Ptr
	Reason string
}

func (e *CorruptNodeError) Error() string {
	return fmt.Sprintf("corrupt block-map node %v: %s", e.Ref, e.Reason)
}

// Is makes errors.Is(err, ErrCorruptNode) true.
func (e *CorruptNodeError) Is(target error) bool { return target == ErrCorruptNode }

func corrupt(ref segment.Ptr, format string, args ...any) error {
	return &CorruptNodeError{Ref: ref, Reason: fmt.Sprintf(format, args...)}
}

// Value is what the map holds for one file block: where the block lives and
// the CRC-32C of its bytes.
type Value struct {
	Ptr segment.Ptr
	CRC uint32
}

// Node is the decoded form of one node, for tools and tests. A leaf (Level 0)
// has Keys and Values of equal length; an internal node has Keys (the lowest
// fbn of each child) and Children of equal length.
type Node struct {
	Level    int
	Keys     []uint64
	Values   []Value
	Children []segment.Ptr
}

// ValidateMetaBlockSize refuses a node size that is not a power of two in
// [MinMetaBlockSize, MaxMetaBlockSize].
func ValidateMetaBlockSize(size int) error {
	if size < MinMetaBlockSize || size > MaxMetaBlockSize || size&(size-1) != 0 {
		return fmt.Errorf("meta block size %d: %w: want a power of two from %d to %d",
			size, ErrInvalidArgument, MinMetaBlockSize, MaxMetaBlockSize)
	}
	return nil
}

// LeafCapacity is the number of entries a leaf of metaBlockSize bytes holds.
func LeafCapacity(metaBlockSize int) int {
	return (metaBlockSize - nodeHeaderSize) / leafEntrySize
}

// InternalCapacity is the number of children an internal node of
// metaBlockSize bytes holds.
func InternalCapacity(metaBlockSize int) int {
	return (metaBlockSize - nodeHeaderSize) / internalEntrySize
}

func putPtr(b []byte, p segment.Ptr) {
	binary.LittleEndian.PutUint64(b[0:8], p.Cno)
	binary.LittleEndian.PutUint32(b[8:12], p.Part)
	binary.LittleEndian.PutUint32(b[12:16], p.Slot)
}

func getPtr(b []byte) segment.Ptr {
	return segment.Ptr{
		Cno:  binary.LittleEndian.Uint64(b[0:8]),
		Part: binary.LittleEndian.Uint32(b[8:12]),
		Slot: binary.LittleEndian.Uint32(b[12:16]),
	}
}

// EncodeNode encodes n into exactly metaBlockSize bytes. It refuses a node
// DecodeNode would refuse.
func EncodeNode(metaBlockSize int, n *Node) ([]byte, error) {
	if err := ValidateMetaBlockSize(metaBlockSize); err != nil {
		return nil, err
	}
	if err := checkNode(segment.Ptr{}, metaBlockSize, n); err != nil {
		return nil, fmt.Errorf("encode node: %w", err)
	}
	b := make([]byte, metaBlockSize)
	encodeInto(b, n.Level, n.Keys, n.Values, n.Children)
	return b, nil
}

// encodeInto writes a node known to be valid into b (zeroed, metaBlockSize
// long). children is used for internal nodes; the tree passes values or
// children, never both.
func encodeInto(b []byte, level int, keys []uint64, values []Value, children []segment.Ptr) {
	copy(b[0:4], nodeMagic)
	b[4] = nodeVersion
	b[5] = byte(level)
	binary.LittleEndian.PutUint16(b[6:8], uint16(len(keys)))
	off := nodeHeaderSize
	if level == 0 {
		for i, k := range keys {
			e := b[off : off+leafEntrySize]
			binary.LittleEndian.PutUint64(e[0:8], k)
			putPtr(e[8:24], values[i].Ptr)
			binary.LittleEndian.PutUint32(e[24:28], values[i].CRC)
			off += leafEntrySize
		}
	} else {
		for i, k := range keys {
			e := b[off : off+internalEntrySize]
			binary.LittleEndian.PutUint64(e[0:8], k)
			putPtr(e[8:24], children[i])
			off += internalEntrySize
		}
	}
	binary.LittleEndian.PutUint32(b[crcOffset:crcOffset+4], crc32.Checksum(b, castagnoli))
}

// checkNode applies the rules every stored node obeys.
func checkNode(ref segment.Ptr, metaBlockSize int, n *Node) error {
	if n.Level < 0 || n.Level >= MaxHeight {
		return corrupt(ref, "level %d out of range [0, %d)", n.Level, MaxHeight)
	}
	capacity := LeafCapacity(metaBlockSize)
	if n.Level > 0 {
		capacity = InternalCapacity(metaBlockSize)
		if len(n.Children) != len(n.Keys) || len(n.Values) != 0 {
			return corrupt(ref, "internal node with %d keys, %d children, %d values", len(n.Keys), len(n.Children), len(n.Values))
		}
	} else if len(n.Values) != len(n.Keys) || len(n.Children) != 0 {
		return corrupt(ref, "leaf with %d keys, %d values, %d children", len(n.Keys), len(n.Values), len(n.Children))
	}
	if len(n.Keys) == 0 {
		return corrupt(ref, "empty node (level %d)", n.Level)
	}
	if len(n.Keys) > capacity {
		return corrupt(ref, "%d entries over capacity %d (level %d, %d-byte node)", len(n.Keys), capacity, n.Level, metaBlockSize)
	}
	for i, k := range n.Keys {
		if k == noUpperBound {
			return corrupt(ref, "entry %d: fbn %d out of range", i, k)
		}
		// An internal node's first key does not route (its range starts
		// where its parent says), and builds before the fix of
		// TestRemovedFirstChildThenInsertBelow could store one above the
		// second: it is not compared, so that their checkpoints still read.
		if i > 0 && k <= n.Keys[i-1] && !(n.Level > 0 && i == 1) {
			return corrupt(ref, "entry %d: fbn %d not above the previous %d (unsorted or duplicate)", i, k, n.Keys[i-1])
		}
	}
	for i, c := range n.Children {
		if c.IsZero() {
			return corrupt(ref, "entry %d: zero child pointer", i)
		}
	}
	for i, v := range n.Values {
		if v.Ptr.IsZero() {
			return corrupt(ref, "entry %d: zero block pointer for fbn %d", i, n.Keys[i])
		}
	}
	return nil
}

// DecodeNode decodes and verifies one node read from ref (used only in
// errors). It refuses a wrong length, bad magic, version or CRC, a level
// outside [0, MaxHeight), an entry count of zero or over capacity, unsorted
// or duplicate keys, zero pointers, and non-zero reserved bytes or padding.
// Whether the level and keys fit where the node hangs in a tree is checked by
// the tree when it loads the node.
func DecodeNode(metaBlockSize int, ref segment.Ptr, b []byte) (*Node, error) {
	if err := ValidateMetaBlockSize(metaBlockSize); err != nil {
		return nil, err
	}
	if len(b) != metaBlockSize {
		return nil, corrupt(ref, "%d bytes, want %d", len(b), metaBlockSize)
	}
	if string(b[0:4]) != nodeMagic {
		return nil, corrupt(ref, "bad magic %q", b[0:4])
	}
	if b[4] != nodeVersion {
		return nil, corrupt(ref, "node format version %d, this build reads %d", b[4], nodeVersion)
	}
	stored := binary.LittleEndian.Uint32(b[crcOffset : crcOffset+4])
	crc := crc32.Update(0, castagnoli, b[:crcOffset])
	crc = crc32.Update(crc, castagnoli, []byte{0, 0, 0, 0})
	crc = crc32.Update(crc, castagnoli, b[crcOffset+4:])
	if crc != stored {
		return nil, corrupt(ref, "CRC %#08x, computed %#08x", stored, crc)
	}
	if binary.LittleEndian.Uint32(b[12:16]) != 0 {
		return nil, corrupt(ref, "reserved header bytes not zero")
	}
	n := &Node{Level: int(b[5])}
	count := int(binary.LittleEndian.Uint16(b[6:8]))
	size, capacity := leafEntrySize, LeafCapacity(metaBlockSize)
	if n.Level > 0 {
		size, capacity = internalEntrySize, InternalCapacity(metaBlockSize)
	}
	if count > capacity {
		// Checked before slicing so that a bad count cannot run past b.
		return nil, corrupt(ref, "%d entries over capacity %d (level %d, %d-byte node)", count, capacity, n.Level, metaBlockSize)
	}
	n.Keys = make([]uint64, count)
	if n.Level == 0 {
		n.Values = make([]Value, count)
	} else {
		n.Children = make([]segment.Ptr, count)
	}
	off := nodeHeaderSize
	for i := 0; i < count; i++ {
		e := b[off : off+size]
		n.Keys[i] = binary.LittleEndian.Uint64(e[0:8])
		if n.Level == 0 {
			n.Values[i] = Value{Ptr: getPtr(e[8:24]), CRC: binary.LittleEndian.Uint32(e[24:28])}
			if binary.LittleEndian.Uint32(e[28:32]) != 0 {
				return nil, corrupt(ref, "entry %d: reserved bytes not zero", i)
			}
		} else {
			n.Children[i] = getPtr(e[8:24])
		}
		off += size
	}
	for _, c := range b[off:] {
		if c != 0 {
			return nil, corrupt(ref, "padding after entry %d not zero", count)
		}
	}
	if err := checkNode(ref, metaBlockSize, n); err != nil {
		return nil, err
	}
	return n, nil
}
