package volume

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Resolve looks path p up in ns from the root directory. p is cleaned first
// ("/" and "" name the root, ".." stops at it). A name under a node that is
// not a directory fails with namespace.ErrNotDir, a name that is not there
// with namespace.ErrNotExist. The error names the node or the name that
// failed, not p: the caller says what it was resolving. Each name is a
// read of ns, which may wait for the store within ctx.
func Resolve(ctx context.Context, ns namespace.Names, p string) (namespace.Node, error) {
	n, err := ns.GetNode(ctx, namespace.RootIno)
	if err != nil {
		return n, err
	}
	for name := range strings.SplitSeq(strings.Trim(path.Clean("/"+p), "/"), "/") {
		if name == "" {
			continue
		}
		if n.Kind != namespace.KindDir {
			// As the namespace's lookup under a node that is not a directory
			// says it.
			return n, fmt.Errorf("node %d: %w", n.Ino, namespace.ErrNotDir)
		}
		if n, err = ns.Lookup(ctx, n.Ino, name); err != nil {
			return n, err
		}
	}
	return n, nil
}
