package fusefs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"ckptfs/config"
	"ckptfs/segment"
	"ckptfs/staging"
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

// openVolume reads the descriptor under root, or creates it from cfg when
// there is none. Two mounts creating it at once agree: the loser of the
// If-None-Match reads the winner's.
func openVolume(ctx context.Context, st staging.Store, root string, cfg config.Config) (Volume, error) {
	key := root + VolumeKey
	for attempt := 0; attempt < 3; attempt++ {
		b, _, err := staging.GetLimited(ctx, st, key, 64<<10) // a descriptor is ~100 bytes
		if err == nil {
			return parseVolume(key, b)
		}
		if !errors.Is(err, staging.ErrNotFound) {
			return Volume{}, fmt.Errorf("read volume descriptor %s: %w", key, err)
		}
		v := Volume{LayoutVersion: LayoutVersion, Format: cfg.Format.String(),
			DataBlockSize: cfg.DataBlockSize, MetaBlockSize: cfg.MetaBlockSize}
		body, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return Volume{}, fmt.Errorf("encode volume descriptor: %w", err)
		}
		_, err = st.Put(ctx, key, append(body, '\n'), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, staging.ErrPrecondition) {
			return Volume{}, fmt.Errorf("create volume descriptor %s: %w", key, err)
		}
	}
	return Volume{}, fmt.Errorf("create volume descriptor %s: it keeps appearing and vanishing", key)
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
