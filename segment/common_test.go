package segment

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
)

const (
	testDBS = 4096
	testMBS = 512
)

var testTag = FileTag("file-1")

// testInode is a valid inode of checkpoint cno.
func testInode(cno uint64, f Format) Inode {
	return Inode{
		Cno: cno, Size: 123456789, Format: f, Height: 2,
		DataBlockSize: testDBS, MetaBlockSize: testMBS,
		Root: Ptr{Cno: cno, Part: 0, Slot: 1}, Parts: 3, MtimeNs: -42,
	}
}

// testMetas returns m distinct meta blocks.
func testMetas(m int) [][]byte {
	out := make([][]byte, m)
	for i := range out {
		b := make([]byte, testMBS)
		for j := range b {
			b[j] = byte(0x80 + i + j)
		}
		out[i] = b
	}
	return out
}

// testBlock returns the bytes of data block fbn.
func testBlock(fbn uint64) []byte {
	b := make([]byte, testDBS)
	for j := range b {
		b[j] = byte(uint64(j) ^ fbn*7)
	}
	return b
}

// countingStore records the ranges of every Get.
type countingStore struct {
	staging.Store
	mu   sync.Mutex
	gets []staging.Range
}

func (c *countingStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	c.mu.Lock()
	c.gets = append(c.gets, r)
	c.mu.Unlock()
	return c.Store.Get(ctx, key, r)
}

func (c *countingStore) take() []staging.Range {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gets
	c.gets = nil
	return g
}

func put(t *testing.T, st staging.Store, key string, b []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, b, staging.PutOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// wantRefusal checks that err is a refusal of key with sentinel.
func wantRefusal(t *testing.T, err error, sentinel error, key string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("got %v, want errors.Is %v", err, sentinel)
	}
	if sentinel == ErrUnsupported {
		if errors.Is(err, ErrCorrupt) {
			t.Fatalf("unsupported version reported as corrupt: %v", err)
		}
	} else if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%v is not ErrCorrupt", err)
	}
	if key != "" && !strings.Contains(err.Error(), key) {
		t.Fatalf("error %q does not name key %q", err, key)
	}
}
