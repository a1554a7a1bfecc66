package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
)

// cpTempPrefix starts the name a copy is built under, in DST's directory,
// before it is renamed over DST: a reader of DST sees the old file or the
// whole copy, never a part.
const cpTempPrefix = ".ckptfs-cp-"

// cpPiece is how much one WriteRef call of a copy of bytes covers: the
// blocks of each piece are sent ahead before the next is written, so a large
// copy streams instead of piling up references until the flush.
const cpPiece = 64 << 20

// cpCleanupTimeout bounds the removal of the temporary name after a failure
// (the command's context may be what failed).
const cpCleanupTimeout = time.Minute

// newCpCmd is "ckptfs cp [-o opts] [--local | --from STORE2] [-v] STORE SRC DST".
func newCpCmd() *cobra.Command {
	var tf toolFlags
	var local, verbose bool
	var from string
	c := &cobra.Command{
		Use:   "cp [flags] STORE SRC DST",
		Short: "copy a file into the volume: by reference inside it, or import one",
		Long: "ckptfs cp: copies the file SRC of the volume of STORE to DST, without mounting.\n" +
			"DST is a new name, an existing file (replaced) or an existing directory\n" +
			"(DST/basename of SRC). The copy is built under a temporary name in DST's\n" +
			"directory and renamed over DST: a reader of DST sees the old file or the\n" +
			"whole copy. Mode and owner are SRC's, and so is the modification time.\n\n" +
			"Inside one volume the copy is made by reference: it shares SRC's objects and\n" +
			"costs a fixed number of requests whatever the size (SRC as of its latest\n" +
			"checkpoint; changes to either file afterwards do not show in the other).\n" +
			"SRC is read as a mount opens it: writes a dead writer left in its write-ahead\n" +
			"log are published first, those of a live writer are copied as bytes.\n" +
			"When that cannot be done (a copy of copies 16 deep, another writer in the\n" +
			"way, a live writer's log) the bytes are copied; -v says which. With --local SRC is a file of this\n" +
			"machine, imported; with --from STORE2 SRC is a file of the volume of STORE2:\n" +
			"both copy the bytes. Only copies inside one volume are by reference.\n\n" +
			"Prints nothing on success unless -v. Directories are not copied (no -r).",
		Args:              argsBetween(3, 3, "STORE SRC DST"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			if local && from != "" {
				return usagef("--local and --from exclude each other")
			}
			so, _, err := parseToolOpts(tf.opts)
			if err != nil {
				return err
			}
			ctx, cancel := toolContext()
			defer cancel()
			dst, err := openCpVolume(ctx, args[0], so)
			if err != nil {
				return err
			}
			defer dst.Close()
			req := cpRequest{dst: dst, src: args[1], dstPath: args[2], local: local, verbose: verbose}
			if from != "" {
				if req.from, err = openCpVolume(ctx, from, so); err != nil {
					return err
				}
				defer req.from.Close()
			}
			return cpRun(ctx, req, c.OutOrStdout())
		},
	}
	tf.register(c)
	c.Flags().BoolVar(&local, "local", false, "SRC is a file of this machine: import it (its bytes are copied)")
	c.Flags().StringVar(&from, "from", "", "SRC is a file of the volume of `STORE2` (its bytes are copied; -o applies to both)")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "say what was copied and how")
	return c
}

// cpVolume is a volume open for writing by cp: its store, namespace and
// descriptor.
type cpVolume struct {
	st   staging.Store
	root string // "" or ends in "/"
	spec string // the store as the user named it, redacted
	ns   namespace.Names
	desc volume.Descriptor
}

// openCpVolume opens the store named spec and the volume in it; a store
// without a volume is refused as the other tools refuse it.
func openCpVolume(ctx context.Context, spec string, so storeOpts) (*cpVolume, error) {
	st, root, err := openStore(ctx, spec, so)
	if err != nil {
		return nil, err
	}
	if _, err := checkVolume(ctx, st, root, spec, so); err != nil {
		return nil, err
	}
	v, err := newCpVolume(ctx, st, root, spec)
	if s3, ok := st.(*s3.Store); ok {
		err = s3.Explain(err)
	}
	return v, err
}

// newCpVolume opens the volume at root of st: its descriptor and namespace.
func newCpVolume(ctx context.Context, st staging.Store, root, spec string) (*cpVolume, error) {
	root = volume.CleanRoot(root)
	desc, err := volume.ReadDescriptor(ctx, st, root)
	if err != nil {
		return nil, err
	}
	ns, err := volume.OpenNames(ctx, st, root, desc, volume.NamesOptions{})
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", redactStore(spec), err)
	}
	return &cpVolume{st: st, root: root, spec: redactStore(spec), ns: ns, desc: desc}, nil
}

// Close waits for the namespace's background work and stops it.
func (v *cpVolume) Close() error { return v.ns.Close() }

// prefix is where file id keeps its objects.
func (v *cpVolume) prefix(id string) string { return volume.FilePrefix(v.root, id) }

// options are the engine options of file id, as a mount gives them: the
// volume's files prefix, so that copies by reference resolve each other.
func (v *cpVolume) options(id string, p engine.Params, readOnly bool) engine.Options {
	return engine.Options{Params: p, FileID: id, FilesPrefix: volume.FilesPrefix(v.root), ReadOnly: readOnly}
}

// params are the engine parameters of a new file of the volume: a mount's
// defaults with the descriptor's format and block sizes.
func (v *cpVolume) params() (engine.Params, error) {
	cfg := config.MountDefault(config.TotalRAM())
	for _, kv := range [][2]string{
		{"format", v.desc.Format},
		{"data_block_size", strconv.FormatInt(v.desc.DataBlockSize, 10)},
		{"meta_block_size", strconv.FormatInt(v.desc.MetaBlockSize, 10)},
	} {
		if err := cfg.Set(kv[0], kv[1]); err != nil {
			return engine.Params{}, fmt.Errorf("volume %s: descriptor's %s: %w", v.spec, kv[0], err)
		}
	}
	p := fusefs.Params(cfg)
	p.WAL = false // the copy is published by its flush
	return p, nil
}

// resolve looks p up from the root ("/" or "" is the root; volume.Resolve).
// A missing name or one under a file is said as of p alone ("p: no such
// file or directory", "p: not a directory"), as cp's messages go.
func (v *cpVolume) resolve(ctx context.Context, p string) (namespace.Node, error) {
	n, err := volume.Resolve(ctx, v.ns, p)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, namespace.ErrNotExist):
		return n, fmt.Errorf("%s: %w", p, namespace.ErrNotExist)
	case errors.Is(err, namespace.ErrNotDir):
		return n, fmt.Errorf("%s: %w", p, namespace.ErrNotDir)
	}
	return n, fmt.Errorf("%s: %w", p, err)
}

// cpRequest is one copy: SRC (in dst, in from, or local) to dstPath in dst.
type cpRequest struct {
	dst     *cpVolume
	from    *cpVolume // SRC's volume when not dst's; nil otherwise
	local   bool      // SRC is a local file
	src     string
	dstPath string
	verbose bool
}

// cpSource is what a copy needs of SRC.
type cpSource struct {
	name  string // the base name, for a DST that is a directory
	mode  uint32
	owner namespace.Owner
	mtime time.Time
	node  namespace.Node // a file of a volume
	// head is the head of a file of a volume; hasHead is false for a
	// file named and never written (empty).
	head    segment.Head
	hasHead bool
	local   *os.File // a local file
	size    int64    // a local file's size
}

// cpRun makes the copy req asks for, with the volumes open, printing what it
// did on stdout with -v.
func cpRun(ctx context.Context, req cpRequest, stdout io.Writer) (err error) {
	src, err := req.source(ctx)
	if err != nil {
		return err
	}
	if src.local != nil {
		defer src.local.Close()
	}
	parent, name, err := req.destination(ctx, src)
	if err != nil {
		return err
	}
	tmp, err := tempName()
	if err != nil {
		return err
	}
	ns := req.dst.ns
	node, err := ns.Create(ctx, parent, tmp, src.mode, src.owner)
	if err != nil {
		return fmt.Errorf("create %s in the directory of %s: %w", tmp, req.dstPath, err)
	}
	defer func() {
		if err == nil {
			return
		}
		// The name goes; the file it named is an orphan, whose objects the
		// cleaner deletes.
		cctx, cancel := context.WithTimeout(context.Background(), cpCleanupTimeout)
		defer cancel()
		if _, uerr := ns.Unlink(cctx, parent, tmp); uerr != nil {
			err = fmt.Errorf("%w; and the temporary name %s is left: %v", err, tmp, uerr)
		}
	}()
	how, err := req.copyData(ctx, &src, node.FileID)
	if err != nil {
		return err
	}
	mtime := src.mtime
	if _, err := ns.SetAttr(ctx, node.Ino, namespace.SetAttr{Mtime: &mtime}); err != nil {
		return fmt.Errorf("set the modification time of %s: %w", req.dstPath, err)
	}
	if _, err := ns.Rename(ctx, parent, tmp, parent, name, 0); err != nil {
		return fmt.Errorf("rename %s over %s: %w", tmp, req.dstPath, err)
	}
	if req.verbose {
		fmt.Fprintf(stdout, "copied %s -> %s %s\n", req.src, req.dstPath, how)
	}
	return nil
}

// source resolves SRC and takes its attributes. A directory is a usage
// error: cp copies files only.
func (req cpRequest) source(ctx context.Context) (cpSource, error) {
	if req.local {
		fi, err := os.Stat(req.src)
		if err != nil {
			return cpSource{}, err
		}
		if fi.IsDir() {
			return cpSource{}, usagef("%s is a directory: -r is not supported", req.src)
		}
		if !fi.Mode().IsRegular() {
			return cpSource{}, fmt.Errorf("%s: not a regular file", req.src)
		}
		f, err := os.Open(req.src)
		if err != nil {
			return cpSource{}, err
		}
		// The size and attributes of what was opened, not of what the
		// name meant a moment ago.
		if fi, err = f.Stat(); err != nil {
			f.Close()
			return cpSource{}, err
		}
		s := cpSource{name: fi.Name(), mode: uint32(fi.Mode().Perm()), mtime: fi.ModTime(), local: f, size: fi.Size()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			s.mode = sys.Mode & namespace.ModeMask
			s.owner = namespace.Owner{Uid: sys.Uid, Gid: sys.Gid}
		}
		return s, nil
	}
	v := req.dst
	if req.from != nil {
		v = req.from
	}
	n, err := v.resolve(ctx, req.src)
	if err != nil {
		return cpSource{}, err
	}
	switch n.Kind {
	case namespace.KindDir:
		return cpSource{}, usagef("%s is a directory: -r is not supported", req.src)
	case namespace.KindFile:
	default:
		return cpSource{}, fmt.Errorf("%s: not a regular file (a %s)", req.src, n.Kind)
	}
	s := cpSource{name: path.Base(path.Clean("/" + req.src)), mode: n.Mode, owner: namespace.Owner{Uid: n.Uid, Gid: n.Gid}, node: n}
	// The file's mtime is its head's unless utimens set a later one.
	s.mtime = time.Unix(0, n.MtimeNs)
	hd, _, err := segment.ReadHead(ctx, v.st, volume.HeadKey(v.prefix(n.FileID)), segment.FileTag(n.FileID))
	switch {
	case errors.Is(err, staging.ErrNotFound): // named, never written
	case err != nil:
		return cpSource{}, fmt.Errorf("head of %s: %w", req.src, err)
	default:
		s.head, s.hasHead = hd, true
		if hd.Inode.MtimeNs > n.MtimeSetNs {
			s.mtime = time.Unix(0, hd.Inode.MtimeNs)
		}
	}
	return s, nil
}

// destination is the directory and name the copy takes: DST, or
// DST/basename(SRC) when DST is a directory.
func (req cpRequest) destination(ctx context.Context, src cpSource) (namespace.Ino, string, error) {
	v := req.dst
	clean := path.Clean("/" + req.dstPath)
	n, err := v.resolve(ctx, clean)
	switch {
	case err == nil && n.Kind == namespace.KindDir:
		parent := n.Ino
		n, err = v.ns.Lookup(ctx, parent, src.name)
		if errors.Is(err, namespace.ErrNotExist) {
			return parent, src.name, nil
		}
		if err != nil {
			return 0, "", fmt.Errorf("%s: %w", path.Join(clean, src.name), err)
		}
		return parent, src.name, req.replaceable(src, n, path.Join(clean, src.name))
	case err == nil:
		dir, err := v.resolve(ctx, path.Dir(clean))
		if err != nil {
			return 0, "", err
		}
		if strings.HasSuffix(req.dstPath, "/") {
			return 0, "", fmt.Errorf("%s: %w", req.dstPath, namespace.ErrNotDir)
		}
		return dir.Ino, path.Base(clean), req.replaceable(src, n, req.dstPath)
	case errors.Is(err, namespace.ErrNotExist):
		if strings.HasSuffix(req.dstPath, "/") {
			return 0, "", fmt.Errorf("%s: no such directory", req.dstPath)
		}
		dir, err := v.resolve(ctx, path.Dir(clean))
		if err != nil {
			return 0, "", err
		}
		if dir.Kind != namespace.KindDir {
			return 0, "", fmt.Errorf("%s: %w", path.Dir(clean), namespace.ErrNotDir)
		}
		return dir.Ino, path.Base(clean), nil
	default:
		return 0, "", err
	}
}

// replaceable says whether the existing node n at p may be replaced by the
// copy: a file other than SRC itself.
func (req cpRequest) replaceable(src cpSource, n namespace.Node, p string) error {
	switch {
	case n.Kind == namespace.KindDir:
		return fmt.Errorf("%s: cannot replace a directory with a file", p)
	case n.Kind != namespace.KindFile:
		return fmt.Errorf("%s: not a regular file (a %s); not replaced", p, n.Kind)
	case !req.local && req.from == nil && n.Ino == src.node.Ino:
		return fmt.Errorf("%s and %s are the same file", req.src, p)
	}
	return nil
}

// copyData fills the new file id with SRC's bytes, by reference when it can,
// and publishes it. It returns how, for -v.
//
// SRC is opened as a mount opens it, so that the copy holds what an open of
// it reads: records a writer that is gone left in its write-ahead log are
// replayed and published first (then the copy is by reference, of that
// checkpoint), and those of a live writer are read without publishing them
// (then the copy by reference is refused and the bytes are copied, records
// included). src's mtime is taken from what was opened.
func (req cpRequest) copyData(ctx context.Context, src *cpSource, id string) (string, error) {
	dst := req.dst
	if src.local != nil {
		p, err := dst.params()
		if err != nil {
			return "", err
		}
		n, err := writeCopy(ctx, dst, id, p, src.local, src.size)
		return fmt.Sprintf("(%d bytes)", n), err
	}
	v := dst
	if req.from != nil {
		v = req.from
	}
	if !src.hasHead {
		// Named, never written: an empty file, which the new name already
		// is (a file with no head reads as empty).
		return "(0 bytes)", nil
	}
	sp, err := v.params()
	if err != nil {
		return "", err
	}
	sf, err := engine.Open(ctx, v.st, v.prefix(src.node.FileID), v.options(src.node.FileID, sp, false))
	if err != nil {
		return "", fmt.Errorf("open %s: %w", req.src, err)
	}
	defer sf.Close()
	if m := sf.Stat().Mtime; m.UnixNano() > src.node.MtimeSetNs {
		src.mtime = m
	}
	p, err := dst.params()
	if err != nil {
		return "", err
	}
	if req.from == nil {
		// The copy takes the source's format and block sizes, which a copy
		// by reference needs.
		ino := src.head.Inode
		p.Format, p.DataBlockSize, p.MetaBlockSize = ino.Format, int(ino.DataBlockSize), int(ino.MetaBlockSize)
		df, err := engine.Create(ctx, dst.st, dst.prefix(id), dst.options(id, p, false))
		if err != nil {
			return "", fmt.Errorf("create the copy of %s: %w", req.src, err)
		}
		err = df.CloneFrom(ctx, sf)
		df.Close()
		if err == nil {
			return "by reference", nil
		}
		if !errors.Is(err, engine.ErrCloneUnsupported) {
			return "", err
		}
		// A refused copy leaves the new file empty: the bytes go into the
		// same id, with the volume's parameters.
		if p, err = dst.params(); err != nil {
			return "", err
		}
	}
	n, err := writeCopy(ctx, dst, id, p, engineReader{ctx, sf}, sf.Size())
	return fmt.Sprintf("(%d bytes)", n), err
}

// writeCopy writes size bytes of r by reference into the new file id and
// publishes them: r is read as the blocks upload, never held whole.
func writeCopy(ctx context.Context, v *cpVolume, id string, p engine.Params, r io.ReaderAt, size int64) (int64, error) {
	// The head is stored at once, as a mount's create stores it: an empty
	// copy publishes nothing else, and a file with no head is opened on
	// each mount in that mount's format, which the first head to land may
	// not be (a writer on the other then cannot merge onto it).
	o := v.options(id, p, false)
	o.StoreHead = true
	f, err := engine.Create(ctx, v.st, v.prefix(id), o)
	if err != nil {
		return 0, fmt.Errorf("create the copy: %w", err)
	}
	defer f.Close()
	for off := int64(0); off < size; off += cpPiece {
		if err := f.WriteRef(ctx, off, min(cpPiece, size-off), r, off); err != nil {
			return 0, fmt.Errorf("copy at %d: %w", off, err)
		}
	}
	if _, err := f.Flush(ctx); err != nil {
		return 0, fmt.Errorf("publish the copy: %w", err)
	}
	return size, nil
}

// engineReader reads an engine file as an io.ReaderAt (the source of a copy
// of bytes), at the checkpoint it was opened at.
type engineReader struct {
	ctx context.Context
	f   *engine.File
}

func (r engineReader) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(r.ctx, p, off) }

// tempName is a fresh temporary name for a copy being built.
func tempName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("temporary name: %w", err)
	}
	return cpTempPrefix + hex.EncodeToString(b[:]), nil
}
