package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// errNoConditions: the store ignores If-None-Match or If-Match.
var errNoConditions = errors.New("the store does not honour conditional writes")

// probeConditions checks that st honours the conditions two mounts of one
// volume rely on: a create with If-None-Match succeeds once and then fails
// with ErrPrecondition, and a write with If-Match of a wrong ETag fails.
// It returns an error wrapping errNoConditions when a condition was ignored,
// and the store's error when a request failed otherwise.
func probeConditions(ctx context.Context, st staging.Store, root string) (err error) {
	var r [16]byte
	rand.Read(r[:])
	// "<root>probe/<32 hex digits>" (volume.ProbePrefix), a few bytes,
	// deleted at once. Nothing lists it: the namespace reads "<root>ns/",
	// the cleaner and fsck "<root>f/". One left behind by a mount killed
	// mid-check is harmless.
	key := volume.ProbePrefix(root) + hex.EncodeToString(r[:])
	body := []byte("ckptfs conditional-write check\n")
	// The key is random: if the create is refused, the object is there
	// because an attempt of this very create landed and its answer was
	// lost (the SDK retried it), not because the condition was wrong.
	_, err = st.Put(ctx, key, body, staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
	if err != nil && !errors.Is(err, staging.ErrPrecondition) {
		return fmt.Errorf("conditional-write check: create %s with If-None-Match: %w", key, err)
	}
	// A probe left behind is harmless (see above): a failed delete
	// does not fail the mount.
	defer func() { _ = st.Delete(ctx, key) }()
	checks := []struct {
		what string
		c    staging.Conditions
	}{
		{"If-None-Match: * over an existing object", staging.Conditions{IfNoneMatch: true}},
		{"If-Match with a wrong ETag", staging.Conditions{IfMatch: `"00000000000000000000000000000000"`}},
	}
	for _, c := range checks {
		_, err := st.Put(ctx, key, body, staging.PutOptions{Conditions: c.c})
		if err == nil {
			return fmt.Errorf("%w: a write with %s succeeded", errNoConditions, c.what)
		}
		if !errors.Is(err, staging.ErrPrecondition) {
			return fmt.Errorf("conditional-write check: write %s with %s: %w", key, c.what, err)
		}
	}
	return nil
}
