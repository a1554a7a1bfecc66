package engine

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Writing by reference: WriteRef records that whole blocks of the file are
// bytes a Source will give later, instead of copying them. The blocks are
// sent ahead with the dirty blocks, in the same objects; their bytes are read
// from the source when the piece holding them uploads (by the upload task;
// for an object sent whole, whose leaves need the blocks' checksums before
// its one request, when it is built) and at the flush, so they are never held
// in the dirty tier. The dirty-data limits do not apply to them: what sends
// them is the unsent bytes reaching a piece, or an object sent whole.
//
// When its object completes, a block sent by reference is stored: it stops
// being a reference and is read from that object. Written again meanwhile —
// by reference, by value, zeroed or in part — it leaves a dead slot, as a
// dirty block does. A block whose object failed is still a reference, and
// the flush reads it from the source.
//
// The source's contract: from WriteRef until the flush that publishes the
// checkpoint returns, ReadAt gives the bytes as they were at WriteRef.

// Source gives the bytes of blocks written by reference.
type Source = io.ReaderAt

// refSrc is where a referenced block's bytes are: off in r.
type refSrc struct {
	r   Source
	off int64
}

// read fills one block from the source; a short read past the source's end
// is zeros (the contract gives whole blocks; a source shorter than the range
// written is the caller's hole).
func (r *refSrc) read(buf []byte) error {
	n, err := r.r.ReadAt(buf, r.off)
	if n < len(buf) {
		if err != nil && err != io.EOF {
			return fmt.Errorf("read source at %d: %w", r.off, err)
		}
		clear(buf[n:])
	}
	return nil
}

// WriteRef writes n bytes at off by reference to src at srcOff. Whole blocks
// become references; a partial block at either end is read from src now and
// written by value.
func (f *File) WriteRef(ctx context.Context, off, n int64, src Source, srcOff int64) error {
	if off < 0 || n < 0 || off+n > MaxFileSize || srcOff < 0 {
		return fmt.Errorf("write by reference %s at %d+%d: %w", f.prefix, off, n, ErrInvalid)
	}
	if err := f.flushMu.RLockCtx(ctx); err != nil { // waits for a Flush (flushgate.go)
		return fmt.Errorf("write by reference %s at %d+%d: waiting for its flush: %w", f.prefix, off, n, err)
	}
	defer f.flushMu.RUnlock()
	bs := int64(f.bs)
	first := (off + bs - 1) / bs * bs // first whole block
	last := (off + n) / bs * bs       // end of the last whole block
	if last <= first {
		first, last = off+n, off+n // no whole block: all by value
	}
	byValue := func(at, m int64) error {
		if m <= 0 {
			return nil
		}
		buf := make([]byte, m)
		if err := (&refSrc{r: src, off: srcOff + (at - off)}).read(buf); err != nil {
			return fmt.Errorf("write by reference %s at %d: %w", f.prefix, at, err)
		}
		_, err := f.WriteAt(ctx, buf, at)
		return err
	}
	if f.walOn() {
		// The WAL must hold the bytes themselves: by value, in pieces.
		const piece = 1 << 20
		for at := off; at < off+n; at += piece {
			if err := byValue(at, min(piece, off+n-at)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := byValue(off, first-off); err != nil {
		return err
	}
	if last > first {
		release, err := f.ranges.lockCtx(ctx, uint64(first/bs), uint64(last/bs), true)
		if err != nil {
			return fmt.Errorf("write by reference %s at %d: waiting for the blocks: %w", f.prefix, first, err)
		}
		f.mu.Lock()
		err = f.writable()
		if err == nil {
			seq := f.streamAt(first, last-first)
			for pos := first; pos < last; pos += bs {
				fbn := uint64(pos / bs)
				ref := &refSrc{r: src, off: srcOff + (pos - off)}
				f.noteSetLocked(fbn, 0, f.bs)
				if d := f.dirty[fbn]; d != nil {
					f.s.touchLocked(d)
					if d.buf != nil {
						f.freeDirtyBuf(d)
						f.dirtyB -= bs
						d.buf = nil
					}
					d.ref, d.seq = ref, seq
				} else {
					nd := &dirtyBlock{ref: ref, seq: seq}
					f.dirty[fbn] = nd
					f.markDirtyLocked(fbn, nd)
					delete(f.zeroed, fbn)
					if f.sendAheadOn() {
						f.s.markUnsent(fbn)
					}
				}
			}
			if last > f.size {
				f.size = last
			}
			f.writeEnd = max(f.writeEnd, last)
			f.mtime = time.Now()
			f.changed = true
			f.stats.BytesWritten += last - first
			if f.sendAheadOn() {
				if err := f.s.sendAheadLocked(ctx); err != nil {
					f.log.Debug("send ahead failed; data stays dirty")
				}
			}
		}
		f.mu.Unlock()
		release()
		if err != nil {
			return err
		}
	}
	return byValue(last, off+n-last)
}

// materializeLocked turns a referenced block into a dirty block holding its
// bytes (before a partial write or zeroing changes it).
func (f *File) materializeLocked(ctx context.Context, d *dirtyBlock) error {
	if d.ref == nil {
		return nil
	}
	buf, err := f.allocBlock(ctx)
	if err != nil {
		return err
	}
	if err := d.ref.read(buf); err != nil {
		f.freeBlock(buf)
		return err
	}
	d.buf, d.ref = buf, nil
	f.dirtyB += int64(f.bs)
	return nil
}

// blockBytes gives the bytes of a dirty block: its buffer, or for a
// reference a copy read from the source into tmp.
func (d *dirtyBlock) bytes(tmp []byte) ([]byte, error) {
	if d.ref == nil {
		return d.buf, nil
	}
	if err := d.ref.read(tmp); err != nil {
		return nil, err
	}
	return tmp, nil
}
