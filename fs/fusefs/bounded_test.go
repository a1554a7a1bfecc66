package fusefs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A volume descriptor larger than any descriptor is refused with
// ErrTooLarge naming its key, without reading it whole.
func TestOpenVolumeOversized(t *testing.T) {
	mem := mem.New()
	key := "vol/" + VolumeKey
	if _, err := mem.Put(context.Background(), key, bytes.Repeat([]byte{' '}, 64<<10+1), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := openVolume(context.Background(), mem, "vol/", config.Default(), false)
	if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), key) {
		t.Fatalf("open over an oversized descriptor: %v, want ErrTooLarge naming %s", err, key)
	}
}
