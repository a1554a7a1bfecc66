package cleaner_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The cleaner refuses a namespace v2 volume by itself, whoever calls it:
// read through v1's log, which such a volume does not have, every file
// would look forgotten. The file's objects stay.
func TestCleanerRefusesNamespaceV2(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	const root = "v/"
	cfg := config.MountDefault(1 << 30)
	cfg.Namespace = config.NamespaceV2
	if _, err := volume.CreateDescriptor(ctx, st, root, cfg); err != nil {
		t.Fatal(err)
	}
	key := volume.FilesPrefix(root) + "0123456789abcdef0123456789abcdef/0000000001.0"
	if _, err := st.Put(ctx, key, []byte("data"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cleaner.CleanVolume(ctx, st, root, cleaner.Options{})
	if !errors.Is(err, volume.ErrNamespaceV2) {
		t.Fatalf("CleanVolume of a namespace v2 volume: %v, want ErrNamespaceV2", err)
	}
	if _, err := st.Head(ctx, key); err != nil {
		t.Fatalf("the file's object after the refusal: %v", err)
	}
}
