package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/staging"
)

// ReadDescriptorETag is ReadDescriptor with the ETag of the descriptor, for
// a replacement conditioned on it (UpgradeDescriptor).
func ReadDescriptorETag(ctx context.Context, st staging.Store, root string) (Descriptor, string, error) {
	key := root + DescriptorKey
	b, info, err := staging.GetLimited(ctx, st, key, maxDescriptorBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return Descriptor{}, "", fmt.Errorf("read volume descriptor %s: %w (no %s there): %w", key, ErrNoVolume, DescriptorKey, err)
	}
	if err != nil {
		return Descriptor{}, "", fmt.Errorf("read volume descriptor %s: %w", key, err)
	}
	d, err := parseDescriptor(key, b)
	return d, info.ETag, err
}

// UpgradeDescriptor replaces the descriptor of a v1 volume, d as read with
// ETag etag, with the same one at layout version 2 and "namespace": "v2"
// (If-Match etag): the last step of ckptfs upgrade (fs/upgrade), once
// every name is in namespace v2. A descriptor changed since is refused
// (staging.ErrPrecondition, wrapped); a lost answer is read back, and a v2
// descriptor of the same format and sizes found there is this write's.
func UpgradeDescriptor(ctx context.Context, st staging.Store, root string, d Descriptor, etag string) (Descriptor, error) {
	key := root + DescriptorKey
	if d.LayoutVersion != layoutV1 || etag == "" {
		return Descriptor{}, fmt.Errorf("upgrade volume descriptor %s: layout version %d, ETag %q: not a v1 descriptor as read", key, d.LayoutVersion, etag)
	}
	v := d
	v.LayoutVersion, v.Namespace = layoutV2, namespaceV2
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Descriptor{}, fmt.Errorf("encode volume descriptor: %w", err)
	}
	_, err = st.Put(ctx, key, append(body, '\n'), staging.PutOptions{Conditions: staging.Conditions{IfMatch: etag}})
	if err == nil {
		return v, nil
	}
	cur, rerr := readDescriptor(ctx, st, key)
	if rerr == nil && cur == v {
		return v, nil // landed, its answer lost (or refused by its own resend)
	}
	return Descriptor{}, fmt.Errorf("upgrade volume descriptor %s: %w", key, err)
}
