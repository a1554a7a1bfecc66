package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptfs/ckptfs/blockmap"
)

// ErrNoData: SeekData or SeekHole at or past the end of the file, or
// SeekData past the last data (the mount answers ENXIO).
var ErrNoData = errors.New("no data at or after the offset")

// errStop ends a scan early.
var errStop = errors.New("stop")

// SeekData returns the first offset at or after off that holds data: off
// itself inside a data block, else the start of the next one. Data is a
// block the map holds or the dirty tier holds, at data-block granularity (a
// block written with zeros is data; a hole punched or truncated away is
// not). At or past the end, or with no data after off, it returns ErrNoData.
// It costs the map's nodes from off to the next data, not the file's size.
func (f *File) SeekData(ctx context.Context, off int64) (int64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.seekable(off); err != nil {
		return 0, err
	}
	bs := int64(f.bs)
	first, end := uint64(off/bs), uint64((f.size+bs-1)/bs)
	next := end // the first data block at or after first, end when none
	for fbn := range f.dirty {
		if fbn >= first && fbn < next {
			next = fbn
		}
	}
	err := f.tree.Scan(ctx, first, next, func(fbn uint64, _ blockmap.Value) error {
		next = fbn
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, fmt.Errorf("seek data in %s at %d: %w", f.prefix, off, err)
	}
	if next >= end {
		return 0, fmt.Errorf("seek data in %s at %d (size %d): %w", f.prefix, off, f.size, ErrNoData)
	}
	return max(off, int64(next)*bs), nil
}

// SeekHole returns the first offset at or after off inside a hole: off
// itself inside a hole block, else the start of the next one, or the end of
// the file (which is a hole). At or past the end it returns ErrNoData. It
// costs the blocks of the data run from off, not the file's size.
func (f *File) SeekHole(ctx context.Context, off int64) (int64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.seekable(off); err != nil {
		return 0, err
	}
	bs := int64(f.bs)
	end := uint64((f.size + bs - 1) / bs)
	h := uint64(off / bs) // the candidate hole
	dirtyRun := func() {
		for h < end && f.dirty[h] != nil {
			h++
		}
	}
	dirtyRun()
	err := f.tree.Scan(ctx, h, end, func(fbn uint64, _ blockmap.Value) error {
		if fbn > h {
			dirtyRun() // dirty blocks may fill the gap up to fbn
			if fbn > h {
				return errStop // h is a hole
			}
		}
		if fbn == h {
			h++
			dirtyRun()
		}
		return nil // fbn < h: inside a run of dirty blocks already passed
	})
	if err != nil && !errors.Is(err, errStop) {
		return 0, fmt.Errorf("seek hole in %s at %d: %w", f.prefix, off, err)
	}
	return min(max(off, int64(h)*bs), f.size), nil
}

func (f *File) seekable(off int64) error {
	if f.closed {
		return fmt.Errorf("seek %s: %w", f.prefix, ErrClosed)
	}
	if off < 0 {
		return fmt.Errorf("seek %s at %d: %w", f.prefix, off, ErrInvalid)
	}
	if off >= f.size {
		return fmt.Errorf("seek %s at %d (size %d): %w", f.prefix, off, f.size, ErrNoData)
	}
	return nil
}
