package wal

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
)

// An owner object larger than any owner is refused with ErrTooLarge naming
// its key, without reading it whole.
func TestLeaseOversizedOwner(t *testing.T) {
	mem := staging.NewMem()
	putOwner(t, mem, bytes.Repeat([]byte{' '}, maxOwnerBytes+1))
	_, err := Open(context.Background(), mem, testPrefix, Options{})
	if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), ownerKey) {
		t.Fatalf("open with an oversized owner: %v, want ErrTooLarge naming %s", err, ownerKey)
	}
}
