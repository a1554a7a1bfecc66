package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// objectBody is an object's bytes without assembling them: a front (the
// header of a parted object), the data blocks (the dirty tier's own buffers,
// which do not change while the file is locked), and a back (meta blocks,
// summary, and the header of a stream object). Pieces are copied out of it
// one at a time, so a flush holds at most the pieces in flight, not a second
// copy of the object.
type objectBody struct {
	front  []byte
	blocks [][]byte
	bs     int64
	back   []byte
	size   int64
}

// readAt fills p with the object's bytes at off.
func (b *objectBody) readAt(p []byte, off int64) {
	for len(p) > 0 {
		switch {
		case off < int64(len(b.front)):
			n := copy(p, b.front[off:])
			p, off = p[n:], off+int64(n)
		case off < int64(len(b.front))+int64(len(b.blocks))*b.bs:
			rel := off - int64(len(b.front))
			blk := b.blocks[rel/b.bs]
			n := copy(p, blk[rel%b.bs:])
			p, off = p[n:], off+int64(n)
		default:
			rel := off - int64(len(b.front)) - int64(len(b.blocks))*b.bs
			n := copy(p, b.back[rel:])
			p, off = p[n:], off+int64(n)
		}
	}
}

// encode lays o out in the file's format. base and ino are set for part 0.
func (f *File) encode(o *plannedObject, base, ino *segment.Inode) (*objectBody, error) {
	l := segment.Layout{Format: f.format, DataBlockSize: uint32(f.bs), MetaBlockSize: uint32(f.mbs),
		DataBlocks: uint32(len(o.fbns)), MetaBlocks: uint32(len(o.metas))}
	h, err := segment.NewHeader(o.name, f.tag, l, base, ino)
	if err != nil {
		return nil, err
	}
	if h.Size() > f.p.MaxObjectBytes {
		// Every object obeys segment_max_object_bytes. Data parts are packed
		// under it; part 0 holds the index nodes above the leaves, which a
		// limit too small for the file's index cannot hold.
		return nil, fmt.Errorf("%w: %s would be %d bytes (%d index nodes), over segment_max_object_bytes %d",
			ErrObjectTooLarge, f.key(o.name), h.Size(), len(o.metas), f.p.MaxObjectBytes)
	}
	hdr, err := segment.EncodeHeader(h)
	if err != nil {
		return nil, err
	}
	back := make([]byte, 0, len(o.metas)*f.mbs+len(o.summary)*segment.SummaryEntrySize+segment.HeaderSize)
	for _, m := range o.metas {
		back = append(back, m...)
	}
	back = append(back, segment.EncodeSummary(o.summary)...)
	b := &objectBody{blocks: o.bufs, bs: int64(f.bs), size: h.Size()}
	if f.format == segment.FormatParted {
		b.front = hdr
	} else {
		back = append(back, hdr...)
	}
	b.back = back
	return b, nil
}

// uploadAll encodes and stores objs, several at once, at most Concurrency
// pieces in flight. It returns one error per object. base and ino, when set,
// are part 0's.
func (f *File) uploadAll(ctx context.Context, objs []*plannedObject, base, ino *segment.Inode, c *flushCounters) []error {
	errs := make([]error, len(objs))
	sem := make(chan struct{}, f.p.Concurrency)
	var wg sync.WaitGroup
	for k, o := range objs {
		body, err := f.encode(o, base, ino)
		if err != nil {
			errs[k] = fmt.Errorf("encode %s: %w", f.key(o.name), err)
			continue
		}
		c.metaBytes.Add(body.size - o.dataBytes(f.bs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = f.putObject(ctx, f.key(o.name), body, sem, c)
			if errs[k] == nil {
				c.dataBytes.Add(o.dataBytes(f.bs))
				c.objects.Add(1)
			}
		}()
	}
	wg.Wait()
	return errs
}

// putObject stores body under key, created with If-None-Match: whole when it
// fits one piece, else as a multipart upload of pieces in parallel. A name
// found taken by another writer is errNameTaken; a failed multipart upload is
// aborted. Every request holds a slot of sem (segment_mpu_max_concurrency).
func (f *File) putObject(ctx context.Context, key string, body *objectBody, sem chan struct{}, c *flushCounters) error {
	id := newWriteID()
	opts := staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true},
		Metadata: map[string]string{writeIDMeta: id}}
	// one makes one request (or a few, one after another) in a slot.
	one := func(req func() error) error {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-sem }()
		return req()
	}
	abort := func(upload string) { _ = one(func() error { f.abort(key, upload, c); return nil }) }
	if body.size <= f.p.ChunkSize {
		return one(func() error {
			f.forceCopy(body.size)
			buf := allocPiece(int(body.size), 0)
			body.readAt(buf, 0)
			c.requests.Add(1)
			_, err := f.st.Put(ctx, key, buf, opts)
			freePiece(buf)
			f.releaseCopy(body.size)
			if err != nil {
				return f.checkLanded(ctx, key, id, body.size, fmt.Errorf("put %s: %w", key, err), c)
			}
			return nil
		})
	}
	var upload string
	if err := one(func() error {
		c.requests.Add(1)
		var err error
		upload, err = f.st.CreateMultipart(ctx, key, opts)
		return err
	}); err != nil {
		return fmt.Errorf("create upload of %s: %w", key, err)
	}
	nparts := int((body.size + f.p.ChunkSize - 1) / f.p.ChunkSize)
	parts := make([]staging.CompletedPart, nparts)
	perr := make([]error, nparts)
	var wg sync.WaitGroup
	for i := range nparts {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			perr[i] = ctx.Err()
		}
		if perr[i] != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			off := int64(i) * f.p.ChunkSize
			n := min(f.p.ChunkSize, body.size-off)
			f.forceCopy(n)
			defer f.releaseCopy(n)
			buf := allocPiece(int(n), 0)
			defer freePiece(buf)
			body.readAt(buf, off)
			c.requests.Add(1)
			etag, err := f.st.UploadPart(ctx, key, upload, int32(i+1), buf)
			if err != nil {
				perr[i] = fmt.Errorf("upload part %d of %s: %w", i+1, key, err)
				return
			}
			parts[i] = staging.CompletedPart{Number: int32(i + 1), ETag: etag}
		}()
	}
	wg.Wait()
	if err := errors.Join(perr...); err != nil {
		abort(upload)
		return err
	}
	err := one(func() error {
		c.requests.Add(1)
		if _, err := f.st.CompleteMultipart(ctx, key, upload, parts, opts.Conditions); err != nil {
			return f.checkLanded(ctx, key, id, body.size, fmt.Errorf("complete upload of %s: %w", key, err), c)
		}
		return nil
	})
	if err != nil {
		abort(upload)
	}
	return err
}

// checkLanded decides what a failed create of key means: if the object there
// carries our write id and its size, the write landed and only its answer
// was lost; if another write id is there, or ours on an object cut short (a
// server that keeps what it received of an upload that broke off), the name
// is taken and the caller moves on to new names; otherwise the error stands.
func (f *File) checkLanded(ctx context.Context, key, id string, size int64, err error, c *flushCounters) error {
	c.requests.Add(1)
	info, herr := f.st.Head(ctx, key)
	if herr != nil {
		return err
	}
	if info.Metadata[writeIDMeta] == id {
		if info.Size == size {
			return nil
		}
		return fmt.Errorf("%w: %s holds %d of its %d bytes (an upload cut short): %w", errNameTaken, key, info.Size, size, err)
	}
	if errors.Is(err, staging.ErrPrecondition) {
		return fmt.Errorf("%w: %w", errNameTaken, err)
	}
	return err
}

// abort discards an upload; it runs even when ctx was cancelled, briefly.
// An abort that fails leaves the upload for the cleaner: not an error here.
func (f *File) abort(key, upload string, c *flushCounters) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.requests.Add(1)
	if err := f.st.AbortMultipart(ctx, key, upload); err != nil {
		f.log.Debug("abort failed; the cleaner will remove the upload")
	}
}
