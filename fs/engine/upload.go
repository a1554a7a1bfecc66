package engine

import (
	"context"
	"fmt"

	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/segment"
)

// objectBody is an object's bytes without assembling them (an upload.Body):
// a front (the header of a parted object), the data blocks (the dirty tier's
// own buffers, which do not change while the file is locked), and a back
// (meta blocks, summary, and the header of a stream object). Pieces are
// copied out of it one at a time, so a flush holds at most the pieces in
// flight, not a second copy of the object.
type objectBody struct {
	front  []byte
	blocks [][]byte
	bs     int64
	back   []byte
	size   int64
}

// Size is the object's length.
func (b *objectBody) Size() int64 { return b.size }

// ReadAt fills p with the object's bytes at off.
func (b *objectBody) ReadAt(p []byte, off int64) {
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
// requests in flight (f.up's cap). It returns one error per object. base
// and ino, when set, are part 0's.
func (f *File) uploadAll(ctx context.Context, objs []*plannedObject, base, ino *segment.Inode, c *flushCounters) []error {
	errs := make([]error, len(objs))
	puts := make([]upload.Item, 0, len(objs))
	var sent []int // the index in objs of each of puts
	for k, o := range objs {
		body, err := f.encode(o, base, ino)
		if err != nil {
			errs[k] = fmt.Errorf("encode %s: %w", f.key(o.name), err)
			continue
		}
		c.metaBytes.Add(body.size - o.dataBytes(f.bs))
		puts = append(puts, upload.Item{Key: f.key(o.name), Body: body})
		sent = append(sent, k)
	}
	for i, err := range f.up.PutAll(ctx, puts, &c.requests) {
		k := sent[i]
		if errs[k] = err; err == nil {
			c.dataBytes.Add(objs[k].dataBytes(f.bs))
			c.objects.Add(1)
		}
	}
	return errs
}
