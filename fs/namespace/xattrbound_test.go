package namespace

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestXattrsBounded: a node's attributes stop at MaxXattrsLen with
// ErrNoSpace; replacing a value within the bound and adding after a removal
// still work, and what was refused is not there on another mount.
func TestXattrsBounded(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	ns := openNS(t, st, Options{})
	f, err := ns.Create(ctx, RootIno, "f", 0o644, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 4096)
	added := 0
	for i := 0; ; i++ {
		if i > MaxXattrsLen/len(value)+1 {
			t.Fatalf("%d attributes of %d bytes taken, past the bound of %d", i, len(value), MaxXattrsLen)
		}
		err := ns.SetXattr(ctx, f.Ino, fmt.Sprintf("user.a%04d", i), value, 0)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("setxattr %d: %v", i, err)
		}
		added++
	}
	if want := MaxXattrsLen / (len(value) + len("user.a0000")); added != want {
		t.Errorf("%d attributes taken, want %d", added, want)
	}
	// Replacing one with a value of the same size fits.
	if err := ns.SetXattr(ctx, f.Ino, "user.a0000", value, XattrReplace); err != nil {
		t.Errorf("replace within the bound: %v", err)
	}
	if err := ns.RemoveXattr(ctx, f.Ino, "user.a0001"); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXattr(ctx, f.Ino, "user.again", value, 0); err != nil {
		t.Errorf("add after a removal: %v", err)
	}
	other := openNS(t, st, Options{})
	names, err := other.ListXattr(context.Background(), f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != added {
		t.Errorf("another mount lists %d attributes, want %d", len(names), added)
	}
}
