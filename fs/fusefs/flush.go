package fusefs

import (
	"context"

	"github.com/ckptfs/ckptfs/fs/engine"
)

// flush publishes a checkpoint of of and counts it: every flush of the mount
// goes through here.
func (fsys *FS) flush(ctx context.Context, of *openFile) (engine.FlushTiming, error) {
	t, err := of.f.Flush(ctx)
	fsys.metrics.recordFlush(t, err)
	fsys.dropStalePages(of)
	return t, err
}
