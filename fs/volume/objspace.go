package volume

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
)

// Objects of other files. A file copied by reference (engine.File.CloneFrom)
// keeps the source's block map, whose pointers name the source's objects;
// its inode's Lineage names the lineage object (segment.Lineage) that says,
// by cno, which file each name belongs to. Every read of an object the map
// points at asks its ObjectSpace for the key and the tag that object must
// carry.
//
// A file a copy points into holds a reference marker "refs/<copy's id>"
// under its prefix (RefKey), written before the copy's checkpoint is
// published: the cleaner keeps every object of the file that a checkpoint
// of a referring file still points at, and does not delete the file while
// one does.

// ErrNoFilesPrefix: an object of another file is named, and the prefix of
// the volume's files, where that file lives, is not known.
var ErrNoFilesPrefix = errors.New("the prefix of the volume's files is not known")

// ObjectSpace resolves the object names of one file's block maps to keys:
// its own, or, through a lineage, another file's. Lineage objects are read
// once and kept (they never change). Safe for concurrent use.
type ObjectSpace struct {
	st     staging.Store
	files  string // files + id + "/" is the prefix of file id; "" unknown
	id     string
	prefix string
	tag    uint64

	mu   sync.Mutex
	lins map[uint64]*lineageCell // GUARDED_BY(mu)
}

type lineageCell struct {
	done chan struct{} // closed once lin or err is set
	lin  *segment.Lineage
	err  error
}

// NewObjectSpace is the object space of file id at prefix; files is where
// the prefixes of a volume's files live (files + id + "/"), or "" to take it
// from prefix when prefix ends in id + "/".
func NewObjectSpace(st staging.Store, files, id, prefix string) *ObjectSpace {
	if files == "" {
		if p, ok := FilesOfPrefix(prefix, id); ok && id != "" {
			files = p
		}
	}
	return &ObjectSpace{st: st, files: files, id: id, prefix: prefix, tag: segment.FileTag(id),
		lins: map[uint64]*lineageCell{}}
}

// ID is the id of the file whose object space this is.
func (s *ObjectSpace) ID() string { return s.id }

// Files is the prefix of the volume's files ("" when unknown).
func (s *ObjectSpace) Files() string { return s.files }

// FilePrefix is the prefix of the volume's file id ("" when unknown).
func (s *ObjectSpace) FilePrefix(id string) string {
	if s.files == "" {
		return ""
	}
	return FilePrefixIn(s.files, id)
}

// Lineage returns the lineage made by checkpoint cno (nil for 0), read once.
func (s *ObjectSpace) Lineage(ctx context.Context, cno uint64) (*segment.Lineage, error) {
	if cno == 0 {
		return nil, nil
	}
	for {
		s.mu.Lock()
		c := s.lins[cno]
		mine := c == nil
		if mine {
			c = &lineageCell{done: make(chan struct{})}
			s.lins[cno] = c
		}
		s.mu.Unlock()
		if mine {
			l, err := segment.ReadLineage(ctx, s.st, s.prefix, s.tag, cno)
			if err == nil {
				c.lin = &l
			} else {
				c.err = fmt.Errorf("lineage of %s at checkpoint %d: %w", s.prefix, cno, err)
				s.mu.Lock()
				delete(s.lins, cno) // not kept: the next reader tries again
				s.mu.Unlock()
			}
			close(c.done)
			return c.lin, c.err
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("lineage of %s at checkpoint %d: %w", s.prefix, cno, ctx.Err())
		}
		if c.err != nil && ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
			continue // the reader that fetched gave up; fetch again
		}
		return c.lin, c.err
	}
}

// Remember keeps a lineage this process made (no read needed).
func (s *ObjectSpace) Remember(l *segment.Lineage) {
	c := &lineageCell{done: make(chan struct{}), lin: l}
	close(c.done)
	s.mu.Lock()
	s.lins[l.Cno] = c
	s.mu.Unlock()
}

// Owner returns the id of the file whose object name is, in a map of
// lineage linCno ("" and own true for the file itself).
func (s *ObjectSpace) Owner(ctx context.Context, linCno uint64, name segment.ObjectName) (id string, own bool, err error) {
	l, err := s.Lineage(ctx, linCno)
	if err != nil {
		return "", false, err
	}
	i := l.Owner(name.Cno)
	if i < 0 || l.Entries[i].FileID == s.id {
		return s.id, true, nil
	}
	return l.Entries[i].FileID, false, nil
}

// Key returns the key holding object name in a map of lineage linCno, and
// the tag that object carries.
func (s *ObjectSpace) Key(ctx context.Context, linCno uint64, name segment.ObjectName) (string, uint64, error) {
	if linCno == 0 {
		return s.prefix + name.String(), s.tag, nil
	}
	id, own, err := s.Owner(ctx, linCno, name)
	if err != nil {
		return "", 0, err
	}
	if own {
		return s.prefix + name.String(), s.tag, nil
	}
	if s.files == "" {
		return "", 0, fmt.Errorf("object %s of %s belongs to file %s, whose prefix is not known here: %w", name, s.prefix, id, ErrNoFilesPrefix)
	}
	return s.FilePrefix(id) + name.String(), segment.FileTag(id), nil
}

// Resolver is Key for the block maps of lineage linCno.
func (s *ObjectSpace) Resolver(linCno uint64) blockmap.Resolver {
	return func(ctx context.Context, name segment.ObjectName) (string, uint64, error) {
		return s.Key(ctx, linCno, name)
	}
}

// Loader returns a node loader for the maps of lineage linCno.
func (s *ObjectSpace) Loader(linCno uint64, f segment.Format, budget int64) *blockmap.ObjectLoader {
	if linCno == 0 {
		return blockmap.NewObjectLoader(s.st, s.prefix, s.tag, f, budget)
	}
	return blockmap.NewResolvingLoader(s.st, s.prefix, s.tag, s.Resolver(linCno), f, budget)
}
