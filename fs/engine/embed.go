package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// A small checkpoint travels in its head.
//
// A checkpoint that is one object (part 0 alone, Parts 1) of at most
// embedLimit bytes is stored by putting <cno>.0 and the head at once, the
// head (segment head version 2) carrying a copy of part 0's bytes: one round
// trip for the flush, whose success is the head's. Reading the file at that
// head needs nothing but the head: the block map's nodes (ObjectLoader.Pin)
// and the data blocks (embedBlock, each checked against the map's CRC as a
// block read from the store is) come from the copy.
//
// If the head lands and the PUT of <cno>.0 does not, the checkpoint is
// published and readable from its head alone, but later checkpoints need the
// object itself: their untouched leaves and blocks may point into it, and
// their part 0 names its inode as their base. So before the next head that
// builds on it, the object is stored from the copy (ensureEmbedded), in
// parallel with that publish's own objects. A writer that opens a head with
// a copy cannot know whether its object landed, and ensures it the same way
// before its first publish.

// embedObj is the copy of part 0 of a one-object checkpoint a head carries.
type embedObj struct {
	name segment.ObjectName
	obj  []byte         // the whole object, verified (segment.DecodeHead)
	hdr  segment.Header // its header
	// landed: the object is known to be stored (this writer's PUT of it
	// succeeded, or ensureEmbedded stored or found it). GUARDED_BY(File.mu).
	landed bool
}

// embedOf is the copy hd carries, or nil.
func embedOf(hd segment.Head) *embedObj {
	if len(hd.Embed) == 0 {
		return nil
	}
	return &embedObj{name: segment.ObjectName{Cno: hd.Inode.Cno, Part: 0}, obj: hd.Embed, hdr: hd.Part0}
}

// defaultEmbedBytes is the default cap of a part 0 carried in its head.
const defaultEmbedBytes = 64 << 10

// embedLimit is the largest part 0 a head carries (Params.EmbedMaxBytes):
// by default 64 KiB, or the part 0 of a file of one data block when that is
// larger, so that a small file of 64 KiB blocks is embedded too.
func (f *File) embedLimit() int64 {
	switch {
	case f.p.EmbedMaxBytes < 0:
		return 0
	case f.p.EmbedMaxBytes > 0:
		return f.p.EmbedMaxBytes
	}
	one := int64(f.bs) + int64(f.mbs) + segment.SummaryEntrySize + segment.HeaderSize
	return min(max(defaultEmbedBytes, one), segment.MaxEmbedBytes)
}

// setEmbedLocked makes e the copy reads are served from (nil: none). The
// caller holds mu exclusively (or owns f alone).
func (f *File) setEmbedLocked(e *embedObj) {
	if old := f.embed; old != nil && (e == nil || old.name != e.name) {
		f.loader.Unpin(old.name)
	}
	f.embed = e
	if e == nil {
		return
	}
	meta := e.obj[e.hdr.MetaOffset(0) : e.hdr.MetaOffset(0)+e.hdr.MetaBytes()]
	if err := f.loader.Pin(e.name, e.hdr, meta); err != nil {
		// DecodeHead checked the counts; a mismatch here is a bug, and the
		// nodes are then read from the store.
		f.log.Error("cannot serve the head's part 0 from memory", zap.Error(err))
	}
}

// embedBlock returns the bytes of the block v points at when the copy holds
// them, checked against v's CRC (nil, nil: not there).
func (f *File) embedBlock(v blockmap.Value) ([]byte, error) {
	e := f.embed
	if e == nil || v.Ptr.Object() != e.name {
		return nil, nil
	}
	key := f.key(e.name) + " (the head's copy)"
	if v.Ptr.Slot >= e.hdr.DataBlocks {
		return nil, &segment.CorruptError{Key: key, Err: segment.ErrSize,
			Detail: fmt.Sprintf("has %d data blocks, the map points at slot %d", e.hdr.DataBlocks, v.Ptr.Slot)}
	}
	off := e.hdr.DataOffset(v.Ptr.Slot)
	b := e.obj[off : off+int64(f.bs)]
	if c := segment.Checksum(b); c != v.CRC {
		return nil, &segment.CorruptError{Key: key, Err: segment.ErrChecksum,
			Detail: fmt.Sprintf("slot %d has CRC %08x, the map says %08x", v.Ptr.Slot, c, v.CRC)}
	}
	return b, nil
}

// startEnsureLocked starts storing the object of an embedded part 0 not
// known to be stored, which the checkpoint being built builds on. The
// returned wait (idempotent; the caller calls it on every path) returns
// when that is done and marks it landed; the caller holds mu.
func (f *File) startEnsureLocked(ctx context.Context, c *flushCounters) func() error {
	e, wait := f.startEnsure(ctx, c)
	return sync.OnceValue(func() error {
		err := wait()
		if err == nil && e != nil {
			e.landed = true
		}
		return err
	})
}

// startEnsure is startEnsureLocked for a caller that waits without mu: the
// wait only waits, and the caller marks e landed (e nil: nothing to store)
// under mu once wait returned nil. It is called with mu held.
func (f *File) startEnsure(ctx context.Context, c *flushCounters) (*embedObj, func() error) {
	e := f.embed
	if e == nil || e.landed {
		return nil, func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- f.ensureEmbedded(ctx, e, c) }()
	return e, sync.OnceValue(func() error { return <-done })
}

// ensureEmbedded makes sure e's object is stored. It is read first: usually
// it landed (its writer's PUT went with the head), and one GET says so. If
// it is absent it is stored from the copy, created with If-None-Match; a
// refusal or a lost answer means an object is there now, read back and
// compared. Another object under the name (a writer that lost the race for
// the head stored its own part 0 under the same name: no head names it, ours
// names this checkpoint) is removed and ours stored.
func (f *File) ensureEmbedded(ctx context.Context, e *embedObj, c *flushCounters) error {
	key := f.key(e.name)
	var perr error // the last PUT's error
	for try := 0; try < 3; try++ {
		c.requests.Add(1)
		got, _, gerr := f.st.Get(ctx, key, staging.Bytes(0, int64(len(e.obj))+1))
		switch {
		case gerr == nil && bytes.Equal(got, e.obj):
			return nil
		case errors.Is(gerr, staging.ErrNotFound):
			if perr != nil && !errors.Is(perr, staging.ErrPrecondition) {
				// Our PUT failed and nothing is there: it did not land.
				return fmt.Errorf("store %s from the head's copy: %w", key, perr)
			}
			c.requests.Add(1)
			_, perr = f.st.Put(ctx, key, e.obj, staging.PutOptions{
				Conditions: staging.Conditions{IfNoneMatch: true},
				Metadata:   map[string]string{writeIDMeta: newWriteID()},
			})
			if perr == nil {
				return nil
			}
			continue // refused or lost: what is there now?
		case gerr != nil && !errors.Is(gerr, staging.ErrInvalidRange):
			return fmt.Errorf("store %s from the head's copy: read what is there: %w", key, gerr)
		case try > 1:
			return fmt.Errorf("store %s from the head's copy: another object is there", key)
		}
		f.log.Warn("replacing an object no head names with the head's copy of it", zap.String("key", key))
		c.requests.Add(1)
		if err := f.st.Delete(ctx, key); err != nil {
			return fmt.Errorf("store %s from the head's copy: remove the object there: %w", key, err)
		}
	}
	return fmt.Errorf("store %s from the head's copy: it does not stay: %w", key, perr)
}

// currentHeadLocked is the head as this writer last published or read it,
// for rewriting it with the same inode (the WAL's marks): its count and its
// copy of part 0 go with it.
func (f *File) currentHeadLocked() segment.Head {
	hd := segment.Head{FileTag: f.tag, Inode: f.head}
	if f.headCount.known && f.headCount.cno == f.head.Cno {
		hd.BlocksKnown, hd.Blocks = true, uint64(f.headCount.n)
	}
	if f.embed != nil && f.embed.name.Cno == f.head.Cno && f.head.Cno != 0 {
		hd.Embed = f.embed.obj
	}
	return hd
}

// rewrittenHeadLocked is the head of the checkpoint already published,
// written again with only its metadata changed (the write-ahead log's mark,
// or records discarded): a nonce of its own makes its bytes, and so its
// ETag on S3 (the MD5 of the bytes), differ from the head's it replaces. A
// writer of another mount that read that head then meets a failed If-Match
// and reads the metadata, instead of replacing it unseen.
func (f *File) rewrittenHeadLocked() segment.Head {
	hd := f.currentHeadLocked()
	hd.Nonce = rand.Uint64() | 1
	return hd
}
