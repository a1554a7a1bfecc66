package fusefs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// LayoutVersion is the version of the volume layout this build writes and
// reads. It is part of the format.
const LayoutVersion = 1

// VolumeKey is the key of the volume descriptor under the root.
const VolumeKey = "ckptfs.json"

// ErrNewerLayout: the volume was written by a newer build; it is refused, not
// read.
var ErrNewerLayout = errors.New("volume layout is newer than this build supports")

// ErrBadVolume: the volume descriptor is not one this build can read.
var ErrBadVolume = errors.New("malformed volume descriptor")

// Volume is the content of the volume descriptor (see the package doc).
type Volume struct {
	LayoutVersion int    `json:"layout_version"`
	Format        string `json:"format"`
	DataBlockSize int64  `json:"data_block_size"`
	MetaBlockSize int64  `json:"meta_block_size"`
}

// ErrNoVolume: there is no volume descriptor under the root (and the caller
// asked not to create one). A mistyped bucket or prefix ends here rather
// than in an empty filesystem.
var ErrNoVolume = errors.New("no ckptfs volume")

// ErrVolumeExists: CreateVolume found a descriptor already there.
var ErrVolumeExists = errors.New("already a volume")

// openVolume reads the descriptor under root. When there is none it fails
// with ErrNoVolume if require is set, and otherwise creates it from cfg.
func openVolume(ctx context.Context, st staging.Store, root string, cfg config.Config, require bool) (Volume, error) {
	key := root + VolumeKey
	for attempt := 0; attempt < 3; attempt++ {
		v, err := readVolume(ctx, st, key)
		if err == nil || !errors.Is(err, ErrNoVolume) || require {
			return v, err
		}
		v, err = CreateVolume(ctx, st, root, cfg)
		if err == nil || !errors.Is(err, ErrVolumeExists) {
			return v, err
		}
		// Two mounts creating it at once agree: the loser of the
		// If-None-Match reads the winner's.
	}
	return Volume{}, fmt.Errorf("create volume descriptor %s: it keeps appearing and vanishing", key)
}

// readVolume reads and checks the descriptor at key; ErrNoVolume when there
// is none.
func readVolume(ctx context.Context, st staging.Store, key string) (Volume, error) {
	b, _, err := staging.GetLimited(ctx, st, key, 64<<10) // a descriptor is ~100 bytes
	if errors.Is(err, staging.ErrNotFound) {
		return Volume{}, fmt.Errorf("read volume descriptor %s: %w (no %s there): %w", key, ErrNoVolume, VolumeKey, err)
	}
	if err != nil {
		return Volume{}, fmt.Errorf("read volume descriptor %s: %w", key, err)
	}
	return parseVolume(key, b)
}

// ReadVolume reads the descriptor of the volume under root; errors.Is(err,
// ErrNoVolume) when there is none. It never writes.
func ReadVolume(ctx context.Context, st staging.Store, root string) (Volume, error) {
	return readVolume(ctx, st, root+VolumeKey)
}

// CreateVolume writes the descriptor of a new volume under root, with the
// block-pointer format and block sizes of cfg, with If-None-Match: an
// existing descriptor is left alone and the error is ErrVolumeExists.
func CreateVolume(ctx context.Context, st staging.Store, root string, cfg config.Config) (Volume, error) {
	key := root + VolumeKey
	v := Volume{LayoutVersion: LayoutVersion, Format: cfg.Format.String(),
		DataBlockSize: cfg.DataBlockSize, MetaBlockSize: cfg.MetaBlockSize}
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Volume{}, fmt.Errorf("encode volume descriptor: %w", err)
	}
	_, err = st.Put(ctx, key, append(body, '\n'), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
	if errors.Is(err, staging.ErrPrecondition) {
		return Volume{}, fmt.Errorf("create volume descriptor %s: %w: %w", key, ErrVolumeExists, err)
	}
	if err != nil {
		return Volume{}, fmt.Errorf("create volume descriptor %s: %w", key, err)
	}
	return v, nil
}

// parseVolume decodes and checks a descriptor read from key.
func parseVolume(key string, b []byte) (Volume, error) {
	var v Volume
	if err := json.Unmarshal(b, &v); err != nil {
		return Volume{}, fmt.Errorf("volume descriptor %s: %w: %v", key, ErrBadVolume, err)
	}
	if v.LayoutVersion > LayoutVersion {
		return Volume{}, fmt.Errorf("volume descriptor %s: layout version %d, this build reads up to %d: %w",
			key, v.LayoutVersion, LayoutVersion, ErrNewerLayout)
	}
	if v.LayoutVersion < 1 {
		return Volume{}, fmt.Errorf("volume descriptor %s: layout version %d: %w", key, v.LayoutVersion, ErrBadVolume)
	}
	if v.Format != segment.FormatStream.String() && v.Format != segment.FormatParted.String() {
		return Volume{}, fmt.Errorf("volume descriptor %s: format %q: %w", key, v.Format, ErrBadVolume)
	}
	return v, nil
}
