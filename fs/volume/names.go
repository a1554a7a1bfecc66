package volume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/staging"
)

// ErrNamespaceV2 wraps the refusals of what namespace v2 does not do yet
// (the cleaner, fsck, a copy into a v2 volume): a caller refuses the
// volume with it rather than read v2's names as v1's, which would see no
// name at all.
var ErrNamespaceV2 = errors.New("not yet on a namespace v2 volume")

// NamesOptions are what OpenNames passes on to the namespace it opens.
type NamesOptions struct {
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// FinishTimeout is v1's namespace.Options.FinishTimeout.
	FinishTimeout time.Duration
	// Mount is this life of the mount, 32 lower-case hex digits, which v2
	// writes as the owner of the inode batches it claims; "" makes a fresh
	// one (namespace.NewFileID). v1 has no use for it.
	Mount string
	// Fresh is how long v2 serves a name it read or wrote without reading
	// it again (nsv2.Config.TTL; the mount gives ns_refresh); 0: until the
	// next Refresh. v1 reads its log instead.
	Fresh time.Duration
}

// OpenNames opens the namespace of the volume at root whose descriptor is
// d: v1's log (namespace.Open, which reads it whole) or v2's Tree
// (nsv2.Open, which reads nothing until asked). A v2 Tree's root has the
// attributes of its object (ns2/root), or nsv2.Config's defaults while none
// is stored: mode 0755, owned by uid and gid 0 (as v1's root starts), one
// fragment.
func OpenNames(ctx context.Context, st staging.Store, root string, d Descriptor, o NamesOptions) (namespace.Names, error) {
	switch d.NamespaceVersion() {
	case config.NamespaceV2:
		mount := o.Mount
		if mount == "" {
			mount = namespace.NewFileID()
		}
		t, err := nsv2.Open(nsv2.Config{Store: st, Root: root, Mount: mount, Log: o.Logger, TTL: o.Fresh})
		if err != nil {
			return nil, fmt.Errorf("open namespace v2 of %q: %w", root, err)
		}
		return t, nil
	default:
		ns, err := namespace.Open(ctx, st, root, namespace.Options{Logger: o.Logger, FinishTimeout: o.FinishTimeout})
		if err != nil {
			return nil, fmt.Errorf("open namespace of %q: %w", root, err)
		}
		return ns, nil
	}
}
