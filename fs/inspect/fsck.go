package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// Problem is one thing fsck found wrong, with the key of the object.
type Problem struct {
	Key string
	Err error
}

func (p Problem) String() string { return p.Key + ": " + p.Err.Error() }

// Report is what Fsck found. Leftovers (open multipart uploads) are not
// corruption: an interrupted writer leaves them and the cleaner removes them.
type Report struct {
	Files     int
	Objects   int
	Problems  []Problem
	Leftovers []staging.Upload
	// Notes are findings that are not corruption: a checkpoint whose part 0
	// is carried by its head and not stored yet (its writer stores it
	// before its next checkpoint).
	Notes []Problem
	// Names is what the check of a namespace v2 volume's names found
	// (fsckv2.go); nil for v1, or below a path.
	Names *nsv2.CheckReport
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Fsck checks the file at p, every file under the directory at p, or every
// file of the volume when p is "" or "/": every object's header (CRC, counts,
// name, file tag), its summary, the CRC of every data block, that the chain of
// checkpoints reads back, that every block of the latest checkpoint points
// into an object that exists, and (for the whole volume) that every stored
// file is reachable from the namespace. Below a directory it reads only the
// objects of the files under it. A path that does not resolve is an error
// (namespace.ErrNotExist for errors.Is). done, when not nil, is called once
// per object checked.
//
// On a namespace v2 volume the whole volume's check also reads every
// object under ns2/ (fsckNames).
func (v *Volume) Fsck(ctx context.Context, p string, done func()) (*Report, error) {
	r := &Report{}
	whole := p == "" || p == "/"
	if whole && v.Namespace() == config.NamespaceV2 {
		if err := v.fsckNames(ctx, r); err != nil {
			return r, err
		}
	}
	files := map[string]string{} // file id -> a path
	if whole {
		err := v.Walk(ctx, func(fp string, n namespace.Node) error {
			if n.Kind == namespace.KindFile {
				files[n.FileID] = fp
			}
			return nil
		})
		if err != nil {
			return r, fmt.Errorf("fsck: %w", err)
		}
		orphans, err := v.ns.Orphans(ctx)
		if err != nil {
			return r, fmt.Errorf("fsck: list the orphans: %w", err)
		}
		for _, o := range orphans {
			files[o.FileID] = "(unlinked)"
		}
	} else {
		n, err := v.Resolve(ctx, p)
		if errors.Is(err, namespace.ErrNotExist) {
			// Said as ls says it: which inode lacked the name is the
			// namespace's business.
			return r, fmt.Errorf("%s: %w", p, namespace.ErrNotExist)
		}
		if err != nil {
			return r, err
		}
		switch n.Kind {
		case namespace.KindFile:
			files[n.FileID] = p
		case namespace.KindDir:
			err := v.walkFrom(ctx, p, n.Ino, func(fp string, n namespace.Node) error {
				if n.Kind == namespace.KindFile {
					files[n.FileID] = fp
				}
				return nil
			})
			if err != nil {
				return r, fmt.Errorf("fsck: %w", err)
			}
		default:
			return r, fmt.Errorf("%s: %w", p, ErrNotFile)
		}
	}
	ids := make([]string, 0, len(files))
	for id := range files {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r.Files++
		if err := v.fsckFile(ctx, id, r, done); err != nil {
			return r, err
		}
	}
	scope := volume.FilesPrefix(v.root)
	if whole {
		all, err := staging.ListAll(ctx, v.st, scope)
		if err != nil {
			return r, fmt.Errorf("fsck: list %s: %w", scope, err)
		}
		for _, o := range all {
			id, _, _ := volume.SplitFileKey(scope, o.Key)
			if _, ok := files[id]; !ok {
				r.Problems = append(r.Problems, Problem{o.Key, errors.New("not reachable: no name in the namespace refers to its file")})
			}
		}
	} else if len(ids) == 1 {
		scope = v.Prefix(ids[0])
	} else if len(ids) == 0 {
		return r, nil // an empty directory: no objects to look at
	}
	ups, err := v.st.ListMultipartUploads(ctx, scope)
	if err != nil {
		return r, fmt.Errorf("fsck: list uploads: %w", err)
	}
	if !whole {
		// A directory's files are scattered over the volume's folder:
		// keep only the uploads of those files.
		ups = slices.DeleteFunc(ups, func(u staging.Upload) bool {
			id, _, _ := volume.SplitFileKey(volume.FilesPrefix(v.root), u.Key)
			_, ok := files[id]
			return !ok
		})
	}
	r.Leftovers = ups
	return r, nil
}

// fsckFile checks one file; it returns an error only when the store cannot
// be read (problems go into r).
func (v *Volume) fsckFile(ctx context.Context, id string, r *Report, done func()) error {
	prefix := v.Prefix(id)
	tag := segment.FileTag(id)
	objs, err := staging.ListAll(ctx, v.st, prefix)
	if err != nil {
		return fmt.Errorf("fsck: list %s: %w", prefix, err)
	}
	have := map[string]bool{}
	for _, o := range objs {
		have[o.Key] = true
		r.Objects++
		if err := v.checkObject(ctx, prefix, tag, o); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.Problems = append(r.Problems, Problem{o.Key, err})
		}
		if done != nil {
			done()
		}
	}
	if !have[volume.HeadKey(prefix)] {
		// A file named and never written has no objects at all: the mount
		// reads it as empty. Objects without a head are a problem.
		if len(objs) > 0 {
			r.Problems = append(r.Problems, Problem{volume.HeadKey(prefix), errors.New("missing: the file has no head")})
		}
		return nil
	}
	// A head may carry its checkpoint's part 0, which may not be stored.
	var inHead string
	if hd, _, err := segment.ReadHead(ctx, v.st, volume.HeadKey(prefix), tag); err == nil && len(hd.Embed) > 0 {
		inHead = prefix + segment.ObjectName{Cno: hd.Inode.Cno}.String()
		if !have[inHead] {
			r.Notes = append(r.Notes, Problem{inHead, errors.New("not stored yet: the head carries this part 0, and its writer stores it before its next checkpoint")})
		}
	}
	f, err := engine.Open(ctx, v.st, prefix, v.opts(id))
	if err != nil {
		return nil // the head's problem is already reported
	}
	defer f.Close()
	if _, err := f.Checkpoints(ctx); err != nil {
		key := keyOf(err, prefix)
		if errors.Is(err, staging.ErrNotFound) {
			// Only the head's own checkpoint must be there: older ones
			// end the chain when the cleaner removed them.
			key = prefix + segment.ObjectName{Cno: f.Stat().Cno}.String()
			err = fmt.Errorf("missing: the head names checkpoint %d: %w", f.Stat().Cno, err)
		}
		r.Problems = append(r.Problems, Problem{key, err})
		return nil
	}
	bs := int64(f.Stat().BlockSize)
	if bs <= 0 {
		return nil
	}
	nblocks := (f.Size() + bs - 1) / bs
	foreign := map[string]bool{}
	const step = 4096
	for b := int64(0); b < nblocks; b += step {
		pl, err := f.BlockPlacement(ctx, uint64(b), int(min(step, nblocks-b)))
		if err != nil {
			r.Problems = append(r.Problems, Problem{keyOf(err, prefix), fmt.Errorf("block map: %w", err)})
			return nil
		}
		for _, x := range pl {
			if !x.Hole && !x.Dirty && !have[x.Key] && !strings.HasPrefix(x.Key, prefix) && !foreign[x.Key] {
				// An object of a file this one was copied from (by
				// reference): it must be there.
				if _, err := v.st.Head(ctx, x.Key); err == nil {
					foreign[x.Key] = true
				} else if !errors.Is(err, staging.ErrNotFound) {
					return fmt.Errorf("fsck: %w", err)
				}
			}
			if !x.Hole && !x.Dirty && !have[x.Key] && !foreign[x.Key] && x.Key != inHead {
				r.Problems = append(r.Problems, Problem{x.Key, fmt.Errorf("missing: block %d of the latest checkpoint points here", x.FBN)})
				return nil
			}
		}
	}
	return nil
}

// keyOf returns the key a segment error names, or def.
func keyOf(err error, def string) string {
	var ce *segment.CorruptError
	if errors.As(err, &ce) && ce.Key != "" {
		return ce.Key
	}
	return def
}

// checkObject checks one object of a file: its head, or a checkpoint object
// read whole (header, summary, and the CRC of every data block).
func (v *Volume) checkObject(ctx context.Context, prefix string, tag uint64, o staging.ObjectInfo) error {
	rel := strings.TrimPrefix(o.Key, prefix)
	if rel == volume.HeadName {
		_, _, err := segment.ReadHead(ctx, v.st, o.Key, tag)
		return err
	}
	if volume.IsWriterKey(rel) {
		// A writer marker (package writermark): it must decode.
		w, err := writermark.Read(ctx, v.st, o.Key)
		if err != nil {
			return err
		}
		return w.Err
	}
	if w, ok := strings.CutPrefix(rel, volume.WALDir); ok {
		// The write-ahead log: each record is read whole and checked; the
		// lease is the writer's business.
		if w == wal.OwnerName {
			return nil
		}
		seq, ok := wal.ParseRecordName(w)
		if !ok {
			return fmt.Errorf("unexpected key in a file's write-ahead log")
		}
		_, err := wal.ReadRecord(ctx, v.st, prefix, tag, seq)
		return err
	}
	if cno, ok := volume.IsLineageKey(rel); ok {
		// Whose objects a copy by reference points into.
		_, err := segment.ReadLineage(ctx, v.st, prefix, tag, cno)
		return err
	}
	if _, ok := volume.IsRefKey(rel); ok {
		return nil // a reference marker: its name is all it says
	}
	name, _, err := segment.ParseObjectName(rel)
	if err != nil {
		return fmt.Errorf("unexpected key in a file's folder: %w", err)
	}
	h, err := segment.DetectHeader(ctx, v.st, o.Key, name, tag)
	if err != nil {
		return err
	}
	sum, err := segment.ReadSummary(ctx, v.st, o.Key, h)
	if err != nil {
		return err
	}
	if _, err := segment.ReadMeta(ctx, v.st, o.Key, h); err != nil && h.MetaBlocks > 0 {
		return err
	}
	if h.DataBlocks == 0 {
		return nil
	}
	data, _, err := v.st.Get(ctx, o.Key, h.DataRange(0, h.DataBlocks))
	if err != nil {
		return fmt.Errorf("read data of %s: %w", o.Key, err)
	}
	bs := int64(h.DataBlockSize)
	if int64(len(data)) != bs*int64(h.DataBlocks) {
		return fmt.Errorf("data region is %d bytes, want %d", len(data), bs*int64(h.DataBlocks))
	}
	for i, e := range sum {
		if c := segment.Checksum(data[int64(i)*bs : int64(i+1)*bs]); c != e.CRC {
			return fmt.Errorf("slot %d (block %d) has CRC %08x, the summary says %08x: %w", i, e.FBN, c, e.CRC, segment.ErrChecksum)
		}
	}
	return nil
}
