package segment

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

// A head object larger than a head is refused with ErrTooLarge naming its
// key, before it is read: here a sparse file of 64 GiB in a directory store.
func TestReadHeadOversized(t *testing.T) {
	root := t.TempDir()
	d, err := dir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + "inode"
	storetest.HugeObject(t, root, key, 64<<30)
	_, _, err = ReadHead(context.Background(), d, key, 1)
	if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), key) {
		t.Fatalf("ReadHead of a 64 GiB head: %v, want ErrTooLarge naming %s", err, key)
	}
}
