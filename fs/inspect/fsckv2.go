package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// fsckNames checks a namespace v2 volume's objects under ns2/ (nsv2.Check):
// each decodes as its key says, each name of a file points at a file with
// a head (or with no objects: an empty file), and it notes orphan records
// without their tombstone and locks decided (or left undecided) longer
// than TxGrace ago. Its damage joins the report's problems, its notes the
// notes; its counts are r.Names.
func (v *Volume) fsckNames(ctx context.Context, r *Report) error {
	file := func(ctx context.Context, id string) (bool, int, error) {
		prefix := v.Prefix(id)
		objs, err := staging.ListAll(ctx, v.st, prefix)
		if err != nil {
			return false, 0, fmt.Errorf("list %s: %w", prefix, err)
		}
		head := false
		for _, o := range objs {
			if o.Key == volume.HeadKey(prefix) {
				head = true
			}
		}
		return head, len(objs), nil
	}
	// The local clock against the store's LastModified: it only dates the
	// notes on locks and records, never decides anything.
	c, err := nsv2.Check(ctx, v.st, v.root, time.Now(), file)
	if err != nil {
		return fmt.Errorf("fsck: %w", err)
	}
	r.Names = c
	for _, f := range c.Problems {
		r.Problems = append(r.Problems, Problem{f.Key, f.Err})
	}
	for _, f := range c.Notes {
		r.Notes = append(r.Notes, Problem{f.Key, f.Err})
	}
	return nil
}
