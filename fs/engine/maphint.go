package engine

import (
	"context"
	"sync"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
)

// MapHint is where the caller last saw a file's block map: the root of the
// checkpoint its head named when it read it (a stat's read, a moment before
// the open). Open reads the head again, as it must (an open shows what was
// published before it began), and meanwhile loads the map's path to the
// file's first block from the hint: the first read of a cold file then waits
// for the data alone, not for one index region per level after the head (two
// round trips on a two-level map, 60 ms of the general link). The root's
// object and the checkpoint's part 1 are
// loaded at once: a checkpoint written from its start (the common shape)
// holds its first blocks and their leaves in part 1, so a two-level walk
// finds both levels after one round trip instead of two; when it does not,
// the guess costs one small GET.
//
// The hint is only a guess of which objects to load: nothing read from it
// is shown unless the head Open reads names the same objects. Objects are
// immutable under their names once a head has named them (the loader keeps
// regions across heads for the same reason), so a region loaded from an old
// head is still that object's; a head that moved meanwhile costs at most
// the loads in vain.
type MapHint struct {
	Format        segment.Format
	MetaBlockSize uint32
	Root          segment.Ptr
	Height        uint8
	Parts         uint32 // the checkpoint's objects (segment.Inode.Parts)
	// Lineage is the head's: a map copied by reference names objects of
	// other files, found through its lineage object; no load is guessed
	// for it.
	Lineage uint64
}

// usable: a hint worth loading from (a map with nodes, in a layout a
// loader reads).
func (h MapHint) usable() bool {
	return h.Height > 0 && h.Lineage == 0 && (h.Format == segment.FormatStream || h.Format == segment.FormatParted) &&
		h.MetaBlockSize >= segment.MinMetaBlockSize && h.MetaBlockSize <= segment.MaxMetaBlockSize
}

// hintWarm is the load Open starts from a MapHint: a goroutine of the
// file's, which Close ends and waits for.
type hintWarm struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// warmFromHint starts loading the path to block 0 of the map h names with
// f's loader, made now for h's layout. Called by Open before the head is
// read, while Open owns f alone.
func (f *File) warmFromHint(h MapHint) {
	if !h.usable() {
		return
	}
	f.loader = blockmap.NewResolvingLoader(f.st, f.prefix, f.tag, f.resolveObject, h.Format, f.p.NodeCacheBytes)
	f.hintFormat, f.hintMBS = h.Format, h.MetaBlockSize
	ctx, cancel := context.WithCancel(context.Background())
	f.hint.cancel = cancel
	t := blockmap.Open(blockmap.Options{MetaBlockSize: int(h.MetaBlockSize)}, f.loader, h.Root, int(h.Height))
	// What fails here is met again, and reported, by the read that needs
	// it; a load in vain is only a guess that missed.
	if first := (segment.ObjectName{Cno: h.Root.Cno, Part: 1}); h.Height > 1 && h.Parts > 1 && h.Root.Object() != first {
		loader := f.loader
		f.hint.wg.Go(func() { _ = loader.Preload(ctx, first) })
	}
	f.hint.wg.Go(func() { _, _, _ = t.Get(ctx, 0) })
}

// keepHintLoader drops the loader warmFromHint made when the head read
// names another layout (adopt then makes one for the head's): the loader
// reads every object of the file as one format.
func (f *File) keepHintLoader(ino segment.Inode) {
	if f.loader != nil && (ino.Format != f.hintFormat || ino.MetaBlockSize != f.hintMBS || ino.Lineage != 0) {
		f.loader = nil
	}
}

// stopHint ends the load from the hint and waits for it.
func (f *File) stopHint() {
	if f.hint.cancel != nil {
		f.hint.cancel()
	}
	f.hint.wg.Wait()
}
