package namespace

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/storetest"
)

// A snapshot or a log entry larger than the format allows is refused with
// ErrTooLarge naming its key, before it is read: the objects are sparse files
// of a directory store, so reading one whole would allocate gigabytes.
func TestOversizedObjectsRefused(t *testing.T) {
	const huge = envHeaderLen + maxObjectBody + 1
	t.Run("snapshot", func(t *testing.T) {
		root := t.TempDir()
		d, err := dir.New(root)
		if err != nil {
			t.Fatal(err)
		}
		key := SnapKey(testRoot, 5)
		storetest.HugeObject(t, root, key, huge)
		_, err = Open(context.Background(), d, testRoot, Options{Now: testClock()})
		if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), key) {
			t.Fatalf("open over an oversized snapshot: %v, want ErrTooLarge naming %s", err, key)
		}
	})
	t.Run("entry", func(t *testing.T) {
		root := t.TempDir()
		d, err := dir.New(root)
		if err != nil {
			t.Fatal(err)
		}
		ns := openNS(t, d, Options{})
		key := LogKey(testRoot, ns.Seq()+1)
		storetest.HugeObject(t, root, key, huge)
		err = ns.Refresh(context.Background())
		if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), key) {
			t.Fatalf("refresh over an oversized entry: %v, want ErrTooLarge naming %s", err, key)
		}
	})
}
