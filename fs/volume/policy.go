package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// PolicyKey is the name of the volume's retention policy under its root:
// which checkpoints the cleaner keeps, set once per volume (ckptfs format,
// ckptfs tune) rather than by each mount. It lives beside the descriptor,
// not in it, so that changing it never rewrites the descriptor.
const PolicyKey = "policy.json"

// maxPolicyBytes bounds the read of a policy (one is ~60 bytes).
const maxPolicyBytes = 16 << 10

// MaxPolicyKeep bounds Policy.Keep; MaxPolicyKeepFor bounds Policy.KeepFor.
const (
	MaxPolicyKeep    = 1000000
	MaxPolicyKeepFor = 100 * 365 * 24 * time.Hour
)

// ErrBadPolicy: a retention policy that does not decode or whose values are
// out of bounds.
var ErrBadPolicy = errors.New("malformed retention policy")

// Policy is the volume's retention policy: the cleaner keeps the newest
// Keep checkpoints of each file (0: all of them) and every checkpoint
// younger than KeepFor. The JSON is part of the format:
//
//	{"version": 1, "keep": 3, "keep_for": "1h0m0s"}
type Policy struct {
	Keep    int
	KeepFor time.Duration
}

// DefaultPolicy is the policy of a volume that stores none.
var DefaultPolicy = Policy{Keep: 3, KeepFor: time.Hour}

type policyJSON struct {
	Version int    `json:"version"`
	Keep    int    `json:"keep"`
	KeepFor string `json:"keep_for"`
}

// String is the policy as flags say it.
func (p Policy) String() string {
	return fmt.Sprintf("keep=%d keep_for=%v", p.Keep, p.KeepFor)
}

// Check says what is wrong with p, if anything.
func (p Policy) Check() error {
	if p.Keep < 0 || p.Keep > MaxPolicyKeep {
		return fmt.Errorf("%w: keep %d: want 0 (all) to %d", ErrBadPolicy, p.Keep, MaxPolicyKeep)
	}
	if p.KeepFor < 0 || p.KeepFor > MaxPolicyKeepFor {
		return fmt.Errorf("%w: keep_for %v: want 0 to 100 years", ErrBadPolicy, p.KeepFor)
	}
	return nil
}

// EncodePolicy is the JSON of p.
func EncodePolicy(p Policy) []byte {
	b, _ := json.Marshal(policyJSON{Version: 1, Keep: p.Keep, KeepFor: p.KeepFor.String()})
	return append(b, '\n')
}

// DecodePolicy decodes and checks a stored policy.
func DecodePolicy(b []byte) (Policy, error) {
	var v policyJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return Policy{}, fmt.Errorf("%w: %v", ErrBadPolicy, err)
	}
	if v.Version != 1 {
		return Policy{}, fmt.Errorf("%w: version %d, this build reads 1", ErrBadPolicy, v.Version)
	}
	d, err := time.ParseDuration(v.KeepFor)
	if err != nil {
		return Policy{}, fmt.Errorf("%w: keep_for %q: %v", ErrBadPolicy, v.KeepFor, err)
	}
	p := Policy{Keep: v.Keep, KeepFor: d}
	return p, p.Check()
}

// ReadPolicy reads the policy of the volume at root: DefaultPolicy and
// stored false when there is none; etag is the stored one's (for
// WritePolicy).
func ReadPolicy(ctx context.Context, st staging.Store, root string) (p Policy, etag string, stored bool, err error) {
	key := root + PolicyKey
	b, info, err := staging.GetLimited(ctx, st, key, maxPolicyBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return DefaultPolicy, "", false, nil
	}
	if err != nil {
		return DefaultPolicy, "", false, fmt.Errorf("read retention policy %s: %w", key, err)
	}
	p, err = DecodePolicy(b)
	if err != nil {
		return DefaultPolicy, info.ETag, true, fmt.Errorf("retention policy %s: %w", key, err)
	}
	return p, info.ETag, true, nil
}

// WritePolicy stores p as the policy of the volume at root: created with
// If-None-Match when etag is "", else replacing the policy of that ETag
// (If-Match). A policy changed meanwhile fails with staging.ErrPrecondition.
func WritePolicy(ctx context.Context, st staging.Store, root string, p Policy, etag string) error {
	if err := p.Check(); err != nil {
		return err
	}
	cond := staging.Conditions{IfNoneMatch: etag == "", IfMatch: etag}
	key := root + PolicyKey
	if _, err := st.Put(ctx, key, EncodePolicy(p), staging.PutOptions{Conditions: cond}); err != nil {
		return fmt.Errorf("store retention policy %s: %w", key, err)
	}
	return nil
}
