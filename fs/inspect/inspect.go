// Package inspect reads a ckptfs volume without mounting it: it resolves paths
// through the namespace, describes files and their checkpoints (objects, live
// and dead bytes, the cost of a cold read), copies out a file at any retained
// checkpoint, and checks every object of a volume (fsck). It never writes.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/wal"
)

// ErrNotFile is returned when a path that must name a file names a directory
// or a symlink.
var ErrNotFile = errors.New("not a regular file")

// Volume is a read-only view of the volume at root in a store.
type Volume struct {
	st   staging.Store
	root string // "" or ends in "/"
	ns   namespace.Names
	desc volume.Descriptor
}

// Open reads the namespace of the volume at root, the one its descriptor
// names (volume.OpenNames): v1's log is read whole, v2's names are read as
// they are asked for. A root without a descriptor is read as v1 (the
// commands refuse it before: ErrNoVolume).
func Open(ctx context.Context, st staging.Store, root string) (*Volume, error) {
	root = volume.CleanRoot(root)
	desc, err := volume.ReadDescriptor(ctx, st, root)
	if errors.Is(err, volume.ErrNoVolume) {
		desc, err = volume.Descriptor{}, nil
	}
	if err != nil {
		return nil, err
	}
	ns, err := volume.OpenNames(ctx, st, root, desc, volume.NamesOptions{})
	if err != nil {
		return nil, err
	}
	return &Volume{st: st, root: root, ns: ns, desc: desc}, nil
}

// Namespace is the namespace format of the volume.
func (v *Volume) Namespace() config.Namespace { return v.desc.NamespaceVersion() }

// Prefix is the key prefix of a file's objects.
func (v *Volume) Prefix(fileID string) string { return volume.FilePrefix(v.root, fileID) }

// Resolve looks a path up ("/" or "" is the root directory; volume.Resolve).
func (v *Volume) Resolve(ctx context.Context, p string) (namespace.Node, error) {
	n, err := volume.Resolve(ctx, v.ns, p)
	if err != nil {
		return n, fmt.Errorf("resolve %s: %w", p, err)
	}
	return n, nil
}

// Entry is one name listed by List.
type Entry struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Ino    uint64 `json:"ino"`
	FileID string `json:"file_id,omitempty"`
	Size   int64  `json:"size"`
	Cno    uint64 `json:"cno,omitempty"`
	Target string `json:"target,omitempty"`
}

// List lists a directory, or describes one file or symlink.
func (v *Volume) List(ctx context.Context, p string) ([]Entry, error) {
	n, err := v.Resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	if n.Kind != namespace.KindDir {
		e, err := v.entry(ctx, path.Base(path.Clean("/"+p)), n)
		return []Entry{e}, err
	}
	ds, err := v.ns.ReadDir(ctx, n.Ino)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	out := make([]Entry, 0, len(ds))
	for _, d := range ds {
		c, err := v.ns.GetNode(ctx, d.Ino)
		if err != nil {
			return out, fmt.Errorf("list %s: %w", p, err)
		}
		e, err := v.entry(ctx, d.Name, c)
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (v *Volume) entry(ctx context.Context, name string, n namespace.Node) (Entry, error) {
	e := Entry{Name: name, Kind: n.Kind.String(), Ino: uint64(n.Ino), FileID: n.FileID, Target: n.Target}
	if n.Kind == namespace.KindFile {
		hd, _, err := segment.ReadHead(ctx, v.st, volume.HeadKey(v.Prefix(n.FileID)), segment.FileTag(n.FileID))
		if errors.Is(err, staging.ErrNotFound) {
			return e, nil // named, never written: empty
		}
		if err != nil {
			return e, fmt.Errorf("head of %s: %w", name, err)
		}
		e.Size, e.Cno = int64(hd.Inode.Size), hd.Inode.Cno
	}
	return e, nil
}

// file resolves p to a regular file.
func (v *Volume) file(ctx context.Context, p string) (namespace.Node, error) {
	n, err := v.Resolve(ctx, p)
	if err != nil {
		return n, err
	}
	if n.Kind != namespace.KindFile {
		return n, fmt.Errorf("%s: %w", p, ErrNotFile)
	}
	return n, nil
}

// opts open files read-only: inspecting a volume changes nothing in it (WAL
// records a crashed writer left stay for the next writer to replay).
func (v *Volume) opts(id string) engine.Options { return engine.Options{FileID: id, ReadOnly: true} }

// Cat writes [off, off+n) of the file at p (n < 0: to the end) as of
// checkpoint cno (0: the latest) to w. It reads only the objects that range
// needs. done, when not nil, is called with the bytes written so far.
func (v *Volume) Cat(ctx context.Context, w io.Writer, p string, cno uint64, off, n int64, done func(int64)) error {
	node, err := v.file(ctx, p)
	if err != nil {
		return err
	}
	if off < 0 {
		return fmt.Errorf("cat %s: negative offset %d", p, off)
	}
	var f *engine.File
	if cno == 0 {
		f, err = engine.Open(ctx, v.st, v.Prefix(node.FileID), v.opts(node.FileID))
		if errors.Is(err, engine.ErrNotExist) {
			if _, herr := v.st.Head(ctx, volume.HeadKey(v.Prefix(node.FileID))); errors.Is(herr, staging.ErrNotFound) {
				return nil // named, never written: empty
			}
		}
	} else {
		f, err = engine.OpenAt(ctx, v.st, v.Prefix(node.FileID), cno, v.opts(node.FileID))
	}
	if err != nil {
		return fmt.Errorf("cat %s: %w", p, err)
	}
	defer f.Close()
	end := f.Size()
	if n >= 0 && off+n < end {
		end = off + n
	}
	buf := make([]byte, 4<<20)
	for pos := off; pos < end; {
		b := buf[:min(int64(len(buf)), end-pos)]
		m, err := f.ReadAt(ctx, b, pos)
		if err != nil && !(errors.Is(err, io.EOF) && m == len(b)) {
			return fmt.Errorf("cat %s at %d: %w", p, pos, err)
		}
		if _, err := w.Write(b[:m]); err != nil {
			return fmt.Errorf("cat %s: write: %w", p, err)
		}
		pos += int64(m)
		if done != nil {
			done(pos - off)
		}
	}
	return nil
}

// Object describes one object of a file.
type Object struct {
	Key        string `json:"key"`
	Part       uint32 `json:"part"`
	Size       int64  `json:"size"`
	Format     string `json:"format"`
	DataBlocks uint32 `json:"data_blocks"`
	DeadBlocks uint32 `json:"dead_blocks"`
	MetaBlocks uint32 `json:"meta_blocks"`
	LiveBytes  int64  `json:"live_bytes"` // data slots not marked dead
	DeadBytes  int64  `json:"dead_bytes"` // data slots marked dead
}

// Checkpoint describes one checkpoint and the objects written for it.
type Checkpoint struct {
	Cno       uint64    `json:"cno"`
	Time      time.Time `json:"time"` // when its part 0 was stored
	Size      int64     `json:"size"`
	Format    string    `json:"format"`
	Published bool      `json:"published"` // on the chain from the head
	// InHead: the head carries a copy of this checkpoint's part 0 (a small
	// checkpoint), which is then read from the head.
	InHead  bool     `json:"part0_in_head,omitempty"`
	Objects []Object `json:"objects"`
	Bytes   int64    `json:"bytes"`
}

// FileInfo describes a file.
type FileInfo struct {
	Path        string       `json:"path"`
	FileID      string       `json:"file_id"`
	Size        int64        `json:"size"`
	Cno         uint64       `json:"cno"`
	Checkpoints []Checkpoint `json:"checkpoints"` // newest first
	Objects     int          `json:"objects"`
	Bytes       int64        `json:"bytes"`
	LiveBytes   int64        `json:"live_bytes"`
	DeadBytes   int64        `json:"dead_bytes"`
	// MappedBytes is what the latest checkpoint maps: its data blocks times
	// the block size, holes excluded (what stat's st_blocks counts), when
	// the head records it (MappedKnown). A punched hole lowers it at the
	// next checkpoint, while LiveBytes, which counts whole objects that
	// older checkpoints may still name, does not move.
	MappedBytes int64 `json:"mapped_bytes"`
	MappedKnown bool  `json:"mapped_known"`
	// ColdReadGets is how many ranged GETs a read of the whole file with
	// nothing cached makes (from the read planner), and ColdReadRequests
	// adds the index nodes it loads first.
	ColdReadGets     int      `json:"cold_read_gets"`
	ColdReadRequests int64    `json:"cold_read_requests"`
	Uploads          []string `json:"open_uploads,omitempty"`
	// WALRecords and WALBytes are the write-ahead log records stored
	// (acknowledged changes a replay will publish, or published ones not
	// deleted yet).
	WALRecords int   `json:"wal_records"`
	WALBytes   int64 `json:"wal_bytes"`
}

// FileInfo describes the file at p.
func (v *Volume) FileInfo(ctx context.Context, p string) (FileInfo, error) {
	node, err := v.file(ctx, p)
	if err != nil {
		return FileInfo{}, err
	}
	return v.fileInfo(ctx, p, node.FileID)
}

func (v *Volume) fileInfo(ctx context.Context, p, id string) (FileInfo, error) {
	fi := FileInfo{Path: p, FileID: id}
	prefix := v.Prefix(id)
	counting := counting.New(v.st)
	hd, _, err := segment.ReadHead(ctx, v.st, volume.HeadKey(prefix), segment.FileTag(id))
	if errors.Is(err, staging.ErrNotFound) {
		// Named, never written: an empty file; its objects, if any, are
		// listed below.
		hd, err = segment.Head{}, nil
	}
	if err != nil {
		return fi, fmt.Errorf("info %s: %w", p, err)
	}
	if hd.BlocksKnown {
		fi.MappedBytes, fi.MappedKnown = int64(hd.Blocks)*int64(hd.Inode.DataBlockSize), true
	}
	var chain []engine.Checkpoint
	if hd.Inode.Cno != 0 || hd.Inode.Format != 0 {
		f, err := engine.Open(ctx, counting, prefix, v.opts(id))
		if err != nil {
			return fi, fmt.Errorf("info %s: %w", p, err)
		}
		defer f.Close()
		fi.Size = f.Size()
		if chain, err = f.Checkpoints(ctx); err != nil {
			return fi, fmt.Errorf("info %s: %w", p, err)
		}
		if len(chain) > 0 {
			fi.Cno = chain[0].Inode.Cno
		}
		before := counting.Snapshot().Total().Requests
		plan, err := f.Plan(ctx, 0, fi.Size)
		if err != nil {
			return fi, fmt.Errorf("info %s: plan a cold read: %w", p, err)
		}
		fi.ColdReadGets = len(plan.Gets)
		fi.ColdReadRequests = counting.Snapshot().Total().Requests - before + int64(len(plan.Gets))
	}

	objs, err := staging.ListAll(ctx, v.st, prefix)
	if err != nil {
		return fi, fmt.Errorf("info %s: list %s: %w", p, prefix, err)
	}
	published := map[uint64]segment.Inode{}
	for _, c := range chain {
		published[c.Inode.Cno] = c.Inode
	}
	byCno := map[uint64]*Checkpoint{}
	tag := segment.FileTag(id)
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, prefix)
		if _, ok := wal.ParseRecordName(strings.TrimPrefix(rel, volume.WALDir)); ok && strings.HasPrefix(rel, volume.WALDir) {
			fi.WALRecords++
			fi.WALBytes += o.Size
			continue
		}
		name, _, err := segment.ParseObjectName(rel)
		if err != nil {
			continue // the head, the lease, or a key fsck reports
		}
		c := byCno[name.Cno]
		if c == nil {
			c = &Checkpoint{Cno: name.Cno}
			byCno[name.Cno] = c
		}
		fi.Objects++
		fi.Bytes += o.Size
		c.Bytes += o.Size
		ob := Object{Key: o.Key, Part: name.Part, Size: o.Size}
		h, err := segment.DetectHeader(ctx, v.st, o.Key, name, tag)
		if err != nil {
			return fi, fmt.Errorf("info %s: %w", p, err)
		}
		ob.Format, ob.DataBlocks, ob.MetaBlocks = h.Format.String(), h.DataBlocks, h.MetaBlocks
		sum, err := segment.ReadSummary(ctx, v.st, o.Key, h)
		if err != nil {
			return fi, fmt.Errorf("info %s: %w", p, err)
		}
		for _, e := range sum {
			if e.Dead {
				ob.DeadBlocks++
			}
		}
		ob.DeadBytes = int64(ob.DeadBlocks) * int64(h.DataBlockSize)
		ob.LiveBytes = int64(ob.DataBlocks-ob.DeadBlocks) * int64(h.DataBlockSize)
		fi.LiveBytes += ob.LiveBytes
		fi.DeadBytes += ob.DeadBytes
		if h.HasInode() {
			c.Time = o.LastModified
			c.Size = int64(h.Inode.Size)
			c.Format = h.Inode.Format.String()
		}
		c.Objects = append(c.Objects, ob)
	}
	if len(hd.Embed) > 0 {
		c := byCno[hd.Inode.Cno]
		if c == nil {
			// Its part 0 is not stored yet: the head carries it.
			c = &Checkpoint{Cno: hd.Inode.Cno, Size: int64(hd.Inode.Size), Format: hd.Inode.Format.String()}
			byCno[hd.Inode.Cno] = c
		}
		c.InHead = true
	}
	for cno, c := range byCno {
		_, c.Published = published[cno]
		sort.Slice(c.Objects, func(i, j int) bool { return c.Objects[i].Part < c.Objects[j].Part })
		fi.Checkpoints = append(fi.Checkpoints, *c)
	}
	sort.Slice(fi.Checkpoints, func(i, j int) bool { return fi.Checkpoints[i].Cno > fi.Checkpoints[j].Cno })
	ups, err := v.st.ListMultipartUploads(ctx, prefix)
	if err != nil {
		return fi, fmt.Errorf("info %s: list uploads: %w", p, err)
	}
	for _, u := range ups {
		fi.Uploads = append(fi.Uploads, u.Key)
	}
	return fi, nil
}

// StoreInfo is the totals of a volume.
type StoreInfo struct {
	Files       int   `json:"files"`
	Dirs        int   `json:"dirs"`
	Symlinks    int   `json:"symlinks"`
	Checkpoints int   `json:"checkpoints"`
	Objects     int   `json:"objects"`
	Bytes       int64 `json:"bytes"`
	FileBytes   int64 `json:"file_bytes"` // sum of the files' sizes
	LiveBytes   int64 `json:"live_bytes"`
	DeadBytes   int64 `json:"dead_bytes"`
	Uploads     int   `json:"open_uploads"`
}

// StoreInfo sums FileInfo over every file of the volume.
func (v *Volume) StoreInfo(ctx context.Context) (StoreInfo, error) {
	var si StoreInfo
	err := v.Walk(ctx, func(p string, n namespace.Node) error {
		switch n.Kind {
		case namespace.KindDir:
			si.Dirs++
			return nil
		case namespace.KindSymlink:
			si.Symlinks++
			return nil
		case namespace.KindFIFO, namespace.KindSocket, namespace.KindCharDev, namespace.KindBlockDev:
			return nil // no data
		}
		si.Files++
		fi, err := v.fileInfo(ctx, p, n.FileID)
		if err != nil {
			return err
		}
		si.Checkpoints += len(fi.Checkpoints)
		si.Objects += fi.Objects
		si.Bytes += fi.Bytes
		si.FileBytes += fi.Size
		si.LiveBytes += fi.LiveBytes
		si.DeadBytes += fi.DeadBytes
		si.Uploads += len(fi.Uploads)
		return nil
	})
	return si, err
}

// Walk calls fn for every node reachable from the root, parents first; a
// file with several names is visited once per name.
func (v *Volume) Walk(ctx context.Context, fn func(p string, n namespace.Node) error) error {
	root, err := v.ns.GetNode(ctx, namespace.RootIno)
	if err != nil {
		return fmt.Errorf("node of /: %w", err)
	}
	if err := fn("/", root); err != nil {
		return err
	}
	return v.walkFrom(ctx, "/", namespace.RootIno, fn)
}

// walkFrom calls fn for every node below the directory ino named p (not for
// the directory itself), parents first.
func (v *Volume) walkFrom(ctx context.Context, p string, ino namespace.Ino, fn func(p string, n namespace.Node) error) error {
	ds, err := v.ns.ReadDir(ctx, ino)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	for _, d := range ds {
		n, err := v.ns.GetNode(ctx, d.Ino)
		if err != nil {
			return fmt.Errorf("node of %s: %w", path.Join(p, d.Name), err)
		}
		cp := path.Join(p, d.Name)
		if err := fn(cp, n); err != nil {
			return err
		}
		if n.Kind == namespace.KindDir {
			if err := v.walkFrom(ctx, cp, n.Ino, fn); err != nil {
				return err
			}
		}
	}
	return nil
}
