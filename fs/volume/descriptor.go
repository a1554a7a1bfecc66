package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// LayoutVersion is the newest volume layout this build reads. It is part
// of the format: 1 is a volume whose namespace is v1's log (fs/namespace),
// 2 one whose names are objects (namespace v2, fs/nsv2). A build refuses a
// larger number (ErrNewerLayout), which is how a build that knows only v1
// refuses a v2 volume rather than read its empty log as an empty
// filesystem. CreateDescriptor writes 1 for a v1 volume, so that the
// builds before v2 still mount those.
const LayoutVersion = layoutV2

// The layout versions, by namespace.
const (
	layoutV1 = 1
	layoutV2 = 2
)

// Namespace formats as the descriptor's "namespace" names them; absent is
// v1.
const (
	namespaceV1 = "v1"
	namespaceV2 = "v2"
)

// maxDescriptorBytes bounds the read of a descriptor (one is ~100 bytes).
const maxDescriptorBytes = 64 << 10

// ErrNewerLayout: the volume was written by a newer build; it is refused, not
// read.
var ErrNewerLayout = errors.New("volume layout is newer than this build supports")

// ErrBadDescriptor: the volume descriptor is not one this build can read.
var ErrBadDescriptor = errors.New("malformed volume descriptor")

// ErrNoVolume: there is no volume descriptor under the root (and the caller
// asked not to create one). A mistyped bucket or prefix ends here rather
// than in an empty filesystem.
var ErrNoVolume = errors.New("no ckptfs volume")

// ErrExists: CreateDescriptor found a descriptor already there.
var ErrExists = errors.New("already a volume")

// Descriptor is the content of the volume descriptor (see the package doc).
type Descriptor struct {
	LayoutVersion int    `json:"layout_version"`
	Format        string `json:"format"`
	DataBlockSize int64  `json:"data_block_size"`
	MetaBlockSize int64  `json:"meta_block_size"`
	// Namespace is "v2" in a layout 2 descriptor and absent ("") in a
	// layout 1 one, which is v1's (see the package doc).
	Namespace string `json:"namespace,omitempty"`
}

// NamespaceVersion is the namespace format of the volume.
func (d Descriptor) NamespaceVersion() config.Namespace {
	if d.Namespace == namespaceV2 {
		return config.NamespaceV2
	}
	return config.NamespaceV1
}

// OpenDescriptor reads the descriptor under root. When there is none it
// fails with ErrNoVolume if require is set, and otherwise creates it from
// cfg.
func OpenDescriptor(ctx context.Context, st staging.Store, root string, cfg config.Config, require bool) (Descriptor, error) {
	key := root + DescriptorKey
	for attempt := 0; attempt < 3; attempt++ {
		v, err := readDescriptor(ctx, st, key)
		if err == nil || !errors.Is(err, ErrNoVolume) || require {
			return v, err
		}
		v, err = CreateDescriptor(ctx, st, root, cfg)
		if err == nil || !errors.Is(err, ErrExists) {
			return v, err
		}
		// Two mounts creating it at once agree: the loser of the
		// If-None-Match reads the winner's.
	}
	return Descriptor{}, fmt.Errorf("create volume descriptor %s: it keeps appearing and vanishing", key)
}

// ReadDescriptor reads the descriptor of the volume under root;
// errors.Is(err, ErrNoVolume) when there is none. It never writes.
func ReadDescriptor(ctx context.Context, st staging.Store, root string) (Descriptor, error) {
	return readDescriptor(ctx, st, root+DescriptorKey)
}

// readDescriptor reads and checks the descriptor at key; ErrNoVolume when
// there is none.
func readDescriptor(ctx context.Context, st staging.Store, key string) (Descriptor, error) {
	b, _, err := staging.GetLimited(ctx, st, key, maxDescriptorBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return Descriptor{}, fmt.Errorf("read volume descriptor %s: %w (no %s there): %w", key, ErrNoVolume, DescriptorKey, err)
	}
	if err != nil {
		return Descriptor{}, fmt.Errorf("read volume descriptor %s: %w", key, err)
	}
	return parseDescriptor(key, b)
}

// CreateDescriptor writes the descriptor of a new volume under root, with
// the block-pointer format and block sizes of cfg, with If-None-Match: an
// existing descriptor is left alone and the error is ErrExists.
func CreateDescriptor(ctx context.Context, st staging.Store, root string, cfg config.Config) (Descriptor, error) {
	key := root + DescriptorKey
	v := Descriptor{LayoutVersion: layoutV1, Format: cfg.Format.String(),
		DataBlockSize: cfg.DataBlockSize, MetaBlockSize: cfg.MetaBlockSize}
	switch cfg.Namespace {
	case config.NamespaceV1:
	case config.NamespaceV2:
		v.LayoutVersion, v.Namespace = layoutV2, namespaceV2
	default:
		return Descriptor{}, fmt.Errorf("create volume descriptor %s: namespace %v: not one this build makes", key, cfg.Namespace)
	}
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Descriptor{}, fmt.Errorf("encode volume descriptor: %w", err)
	}
	_, err = st.Put(ctx, key, append(body, '\n'), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
	if errors.Is(err, staging.ErrPrecondition) {
		return Descriptor{}, fmt.Errorf("create volume descriptor %s: %w: %w", key, ErrExists, err)
	}
	if err != nil {
		return Descriptor{}, fmt.Errorf("create volume descriptor %s: %w", key, err)
	}
	return v, nil
}

// parseDescriptor decodes and checks a descriptor read from key.
func parseDescriptor(key string, b []byte) (Descriptor, error) {
	return parseDescriptorUpTo(key, b, LayoutVersion)
}

// parseDescriptorUpTo is parseDescriptor for a build that reads layouts up
// to newest: the tests read with 1, as the builds before namespace v2 did.
func parseDescriptorUpTo(key string, b []byte, newest int) (Descriptor, error) {
	var v Descriptor
	if err := json.Unmarshal(b, &v); err != nil {
		return Descriptor{}, fmt.Errorf("volume descriptor %s: %w: %v", key, ErrBadDescriptor, err)
	}
	if v.LayoutVersion > newest {
		return Descriptor{}, fmt.Errorf("volume descriptor %s: layout version %d, this build reads up to %d: %w",
			key, v.LayoutVersion, newest, ErrNewerLayout)
	}
	if v.LayoutVersion < 1 {
		return Descriptor{}, fmt.Errorf("volume descriptor %s: layout version %d: %w", key, v.LayoutVersion, ErrBadDescriptor)
	}
	// Each layout has its one namespace: a v1 descriptor naming v2 would
	// be mounted as v1 by the builds before v2, which ignore the field.
	switch {
	case v.LayoutVersion == layoutV1 && (v.Namespace == "" || v.Namespace == namespaceV1):
	case v.LayoutVersion == layoutV2 && v.Namespace == namespaceV2:
	default:
		return Descriptor{}, fmt.Errorf("volume descriptor %s: layout version %d with namespace %q: %w",
			key, v.LayoutVersion, v.Namespace, ErrBadDescriptor)
	}
	if v.Format != segment.FormatStream.String() && v.Format != segment.FormatParted.String() {
		return Descriptor{}, fmt.Errorf("volume descriptor %s: format %q: %w", key, v.Format, ErrBadDescriptor)
	}
	return v, nil
}
