package blockmap

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
)

func TestCapacities(t *testing.T) {
	tests := []struct {
		size, leaf, internal int
	}{
		{256, 7, 10},
		{512, 15, 20},
		{4096, 127, 170},
		{65536, 2047, 2730},
	}
	for _, tc := range tests {
		if got := LeafCapacity(tc.size); got != tc.leaf {
			t.Errorf("LeafCapacity(%d) = %d, want %d", tc.size, got, tc.leaf)
		}
		if got := InternalCapacity(tc.size); got != tc.internal {
			t.Errorf("InternalCapacity(%d) = %d, want %d", tc.size, got, tc.internal)
		}
	}
	for _, size := range []int{0, 128, 255, 257, 3000, 128 << 10} {
		if err := ValidateMetaBlockSize(size); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ValidateMetaBlockSize(%d) = %v, want ErrInvalidArgument", size, err)
		}
	}
}

func leafNode(keys ...uint64) *Node {
	n := &Node{Keys: keys}
	for _, k := range keys {
		n.Values = append(n.Values, val(k, 1))
	}
	return n
}

func internalNode(level int, keys ...uint64) *Node {
	n := &Node{Level: level, Keys: keys}
	for i := range keys {
		n.Children = append(n.Children, segment.Ptr{Cno: 3, Part: 1, Slot: uint32(i)})
	}
	return n
}

func TestNodeRoundTrip(t *testing.T) {
	full := make([]uint64, LeafCapacity(256))
	for i := range full {
		full[i] = uint64(i * 3)
	}
	fullInternal := make([]uint64, InternalCapacity(4096))
	for i := range fullInternal {
		fullInternal[i] = uint64(i) << 20
	}
	tests := []struct {
		name string
		size int
		node *Node
	}{
		{"one-entry leaf", 256, leafNode(5)},
		{"full small leaf", 256, leafNode(full...)},
		{"largest fbn", 512, leafNode(0, math.MaxUint64-1)},
		{"internal", 256, internalNode(1, 0, 100, 200)},
		{"full 4K internal", 4096, internalNode(7, fullInternal...)},
		{"highest level", 64 << 10, internalNode(MaxHeight-1, 9)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeNode(tc.size, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tc.size {
				t.Fatalf("encoded %d bytes, want %d", len(b), tc.size)
			}
			got, err := DecodeNode(tc.size, segment.Ptr{Cno: 1}, b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Level != tc.node.Level || !slices.Equal(got.Keys, tc.node.Keys) ||
				!slices.Equal(got.Values, tc.node.Values) || !slices.Equal(got.Children, tc.node.Children) {
				t.Fatalf("decoded %+v, want %+v", got, tc.node)
			}
		})
	}
}

// reseal recomputes the CRC of a block after a test changed it.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[8:12], 0)
	binary.LittleEndian.PutUint32(b[8:12], crc32.Checksum(b, castagnoli))
	return b
}

func TestDecodeRefusals(t *testing.T) {
	ref := segment.Ptr{Cno: 42, Part: 3, Slot: 7}
	leaf := func() []byte {
		b, err := EncodeNode(256, leafNode(10, 20, 30))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	internal := func() []byte {
		b, err := EncodeNode(256, internalNode(2, 10, 20, 30))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	entry := func(b []byte, i, size int) []byte { return b[16+i*size:] }
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", leaf()[:255], "255 bytes"},
		{"long", append(leaf(), 0), "257 bytes"},
		{"magic", reseal(func() []byte { b := leaf(); b[0] = 'X'; return b }()), "bad magic"},
		{"version", reseal(func() []byte { b := leaf(); b[4] = 2; return b }()), "version 2"},
		{"crc", func() []byte { b := leaf(); b[20]++; return b }(), "CRC"},
		{"reserved header", reseal(func() []byte { b := leaf(); b[13] = 1; return b }()), "reserved header"},
		{"count over leaf capacity", reseal(func() []byte { b := leaf(); b[6] = 8; return b }()), "over capacity 7"},
		{"count over internal capacity", reseal(func() []byte { b := internal(); b[6] = 11; return b }()), "over capacity 10"},
		{"empty", reseal(func() []byte { b := make([]byte, 256); copy(b, "CKBN\x01"); return b }()), "empty node"},
		{"unsorted", reseal(func() []byte {
			b := leaf()
			binary.LittleEndian.PutUint64(entry(b, 1, 32), 5)
			return b
		}()), "entry 1: fbn 5 not above the previous 10"},
		{"duplicate", reseal(func() []byte {
			b := internal()
			binary.LittleEndian.PutUint64(entry(b, 2, 24), 20)
			return b
		}()), "entry 2: fbn 20 not above the previous 20"},
		{"fbn out of range", reseal(func() []byte {
			b := leaf()
			binary.LittleEndian.PutUint64(entry(b, 2, 32), math.MaxUint64)
			return b
		}()), "out of range"},
		{"zero child pointer", reseal(func() []byte {
			b := internal()
			clear(entry(b, 1, 24)[8:24])
			return b
		}()), "entry 1: zero child pointer"},
		{"zero block pointer", reseal(func() []byte {
			b := leaf()
			clear(entry(b, 0, 32)[8:24])
			return b
		}()), "entry 0: zero block pointer"},
		{"leaf entry reserved", reseal(func() []byte { b := leaf(); entry(b, 2, 32)[30] = 1; return b }()), "entry 2: reserved"},
		{"padding", reseal(func() []byte { b := leaf(); b[255] = 1; return b }()), "padding"},
		{"level too high", reseal(func() []byte { b := internal(); b[5] = MaxHeight; return b }()), "level 32 out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeNode(256, ref, tc.b)
			if !errors.Is(err, ErrCorruptNode) {
				t.Fatalf("err = %v, want ErrCorruptNode", err)
			}
			var ce *CorruptNodeError
			if !errors.As(err, &ce) || ce.Ref != ref {
				t.Fatalf("err = %v does not name node %v", err, ref)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ref.String()) {
				t.Fatalf("err = %q, want it to say %q and name %v", err, tc.want, ref)
			}
		})
	}
}

func TestEncodeRefusals(t *testing.T) {
	tests := []struct {
		name string
		size int
		node *Node
	}{
		{"bad size", 300, leafNode(1)},
		{"empty", 256, leafNode()},
		{"over capacity", 256, leafNode(1, 2, 3, 4, 5, 6, 7, 8)},
		{"unsorted", 256, leafNode(2, 1)},
		{"values missing", 256, &Node{Keys: []uint64{1}}},
		{"children missing", 256, &Node{Level: 1, Keys: []uint64{1}}},
		{"zero value", 256, &Node{Keys: []uint64{1}, Values: []Value{{}}}},
		{"negative level", 256, &Node{Level: -1, Keys: []uint64{1}, Children: []segment.Ptr{{Cno: 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := EncodeNode(tc.size, tc.node); err == nil {
				t.Fatalf("EncodeNode(%d, %+v) succeeded", tc.size, tc.node)
			}
		})
	}
}

// FuzzDecodeNode: decoding any bytes returns a node or an ErrCorruptNode,
// never panics; a decoded node encodes back to the same bytes.
func FuzzDecodeNode(f *testing.F) {
	for _, n := range []*Node{leafNode(1, 2, 3), internalNode(1, 0, 50), leafNode(0)} {
		b, err := EncodeNode(256, n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		size := len(b)
		if ValidateMetaBlockSize(size) != nil {
			size = MinMetaBlockSize
		}
		if fixCRC && len(b) >= 16 {
			// Let the fuzzer reach the checks behind the CRC.
			b = reseal(slices.Clone(b))
		}
		n, err := DecodeNode(size, segment.Ptr{Cno: 9}, b)
		if err != nil {
			if !errors.Is(err, ErrCorruptNode) {
				t.Fatalf("error %v is not ErrCorruptNode", err)
			}
			return
		}
		again, err := EncodeNode(size, n)
		if err != nil {
			t.Fatalf("re-encode a decoded node: %v", err)
		}
		if string(again) != string(b) {
			t.Fatalf("decode then encode changed the bytes")
		}
	})
}
