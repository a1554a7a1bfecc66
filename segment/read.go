package segment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"sync"

	"github.com/ckptfs/ckptfs/staging"
)

// ReadHeader reads and verifies the header of the object at key, of a file
// whose format f is known: for FormatStream with exactly one suffix request
// (the last 256 bytes), for FormatParted with one ranged request for the
// first 256 bytes. The object must be want's object of the file tagged
// fileTag, laid out as f, and exactly as long as its header counts.
func ReadHeader(ctx context.Context, st staging.Store, key string, want ObjectName, fileTag uint64, f Format) (Header, error) {
	var r staging.Range
	switch f {
	case FormatStream:
		r = staging.Suffix(HeaderSize)
	case FormatParted:
		r = staging.Bytes(0, HeaderSize)
	default:
		return Header{}, fmt.Errorf("read header of %s: %w: reader format %v", key, ErrFormat, f)
	}
	b, info, err := getHeaderBytes(ctx, st, key, r)
	if err != nil {
		return Header{}, err
	}
	return checkHeader(key, b, info.Size, want, fileTag, f)
}

// DetectHeader reads the header of an object whose layout the reader does not
// know (opening a given checkpoint, the cleaner). It looks at the end first;
// if the end does not hold a stream header (bad magic) it reads the start and
// parses a parted header there. An unsuffixed object name ("<cno>") is never
// tail first: its start is read directly. The checks are ReadHeader's.
func DetectHeader(ctx context.Context, st staging.Store, key string, want ObjectName, fileTag uint64) (Header, error) {
	if _, suffixed, err := ParseObjectName(path.Base(key)); err != nil || suffixed {
		b, info, err := getHeaderBytes(ctx, st, key, staging.Suffix(HeaderSize))
		if err != nil {
			return Header{}, err
		}
		h, err := checkHeader(key, b, info.Size, want, fileTag, 0)
		if err == nil {
			// The end of an object holds a parted header only when the
			// object is nothing but its header (no data, no meta), where
			// both layouts are the same bytes.
			if h.Format == FormatParted && info.Size != HeaderSize {
				return Header{}, &CorruptError{Key: key, Err: ErrFormat,
					Detail: "ends with a parted header but is longer than one"}
			}
			return h, nil
		}
		if !errors.Is(err, ErrBadMagic) || info.Size <= HeaderSize {
			return Header{}, err
		}
	}
	b, info, err := getHeaderBytes(ctx, st, key, staging.Bytes(0, HeaderSize))
	if err != nil {
		return Header{}, err
	}
	return checkHeader(key, b, info.Size, want, fileTag, FormatParted)
}

func getHeaderBytes(ctx context.Context, st staging.Store, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	b, info, err := st.Get(ctx, key, r)
	if errors.Is(err, staging.ErrInvalidRange) {
		// Only a range from 0 fails this way: the object is empty.
		return nil, info, &CorruptError{Key: key, Err: ErrSize, Detail: "is empty, too short for its 256-byte header"}
	}
	if err != nil {
		return nil, info, fmt.Errorf("read header of %s: %w", key, err)
	}
	return b, info, nil
}

// checkHeader decodes b and checks it against what the reader knows: the
// format f (0: unknown), the object name, the file tag, and the object's
// length size.
func checkHeader(key string, b []byte, size int64, want ObjectName, fileTag uint64, f Format) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, &CorruptError{Key: key, Err: ErrSize,
			Detail: fmt.Sprintf("is %d bytes, shorter than its %d-byte header", size, HeaderSize)}
	}
	h, err := DecodeHeader(b)
	if err != nil {
		return Header{}, withKey(err, key)
	}
	refuse := func(sentinel error, format string, args ...any) (Header, error) {
		return Header{}, &CorruptError{Key: key, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case f != 0 && h.Format != f:
		return refuse(ErrFormat, "is laid out %v, expected %v", h.Format, f)
	case h.Name != want:
		return refuse(ErrWrongObject, "names object %v in its header, expected %v", h.Name, want)
	case h.FileTag != fileTag:
		return refuse(ErrWrongObject, "belongs to another file (tag %#016x, expected %#016x)", h.FileTag, fileTag)
	case h.Size() != size:
		return refuse(ErrSize, "is %d bytes but its header counts %d (%d data, %d meta blocks)",
			size, h.Size(), h.DataBlocks, h.MetaBlocks)
	}
	return h, nil
}

// ReadMeta reads exactly the meta region of the object at key (one ranged
// request): MetaBlocks × MetaBlockSize bytes, meta block i at
// i × MetaBlockSize. No request is made when there are no meta blocks.
func ReadMeta(ctx context.Context, st staging.Store, key string, h Header) ([]byte, error) {
	return ReadMetaBlocks(ctx, st, key, h, 0, h.MetaBlocks)
}

// ReadMetaBlocks reads count meta blocks from first (one ranged request).
func ReadMetaBlocks(ctx context.Context, st staging.Store, key string, h Header, first, count uint32) ([]byte, error) {
	if uint64(first)+uint64(count) > uint64(h.MetaBlocks) {
		return nil, fmt.Errorf("read meta blocks %d+%d of %s: %w: the object has %d",
			first, count, key, staging.ErrInvalidRange, h.MetaBlocks)
	}
	if count == 0 {
		return nil, nil
	}
	n := int64(count) * int64(h.MetaBlockSize)
	b, info, err := st.Get(ctx, key, staging.Bytes(h.MetaOffset(first), n))
	if err != nil {
		return nil, fmt.Errorf("read meta blocks of %s: %w", key, err)
	}
	if err := checkRegion(key, "meta blocks", b, n, info.Size, h); err != nil {
		return nil, err
	}
	return b, nil
}

// MaxTailGuess bounds the tail ReadHeaderMeta asks for with the header: a
// guess past it is not worth the bytes it may fetch in vain (a request's
// latency carries about this much at one request's share of a link).
const MaxTailGuess = 1 << 20

// ReadHeaderMeta reads and verifies the header of the object at key, as
// ReadHeader, and its meta region, as ReadMeta, in one round trip when the
// object's tail (from the meta region to its end) is at most guess bytes:
// a stream object's last max(guess, 256) bytes hold its meta region, summary
// and header, one suffix request; a parted object's header is read beside
// that suffix, two requests at once. Otherwise the meta region is read
// after the header, as ReadMeta. It also returns the object's tail length,
// the guess for the next object of the file.
func ReadHeaderMeta(ctx context.Context, st staging.Store, key string, want ObjectName, fileTag uint64, f Format, guess int64) (Header, []byte, int64, error) {
	guess = min(max(guess, HeaderSize), MaxTailGuess)
	var (
		h    Header
		tail []byte
		size int64
		err  error
	)
	switch f {
	case FormatStream:
		var info staging.ObjectInfo
		tail, info, err = getHeaderBytes(ctx, st, key, staging.Suffix(guess))
		if err != nil {
			return Header{}, nil, 0, err
		}
		if int64(len(tail)) != min(guess, info.Size) {
			return Header{}, nil, 0, &CorruptError{Key: key, Err: ErrSize, Detail: fmt.Sprintf(
				"gave %d bytes for its last %d (object %d bytes)", len(tail), guess, info.Size)}
		}
		h, err = checkHeader(key, tail[max(len(tail)-HeaderSize, 0):], info.Size, want, fileTag, f)
		size = info.Size
	case FormatParted:
		if guess <= HeaderSize {
			h, err = ReadHeader(ctx, st, key, want, fileTag, f)
			size = h.Size()
			break
		}
		var (
			wg      sync.WaitGroup
			info    staging.ObjectInfo
			tailErr error
		)
		wg.Go(func() { tail, info, tailErr = st.Get(ctx, key, staging.Suffix(guess)) })
		h, err = ReadHeader(ctx, st, key, want, fileTag, f)
		wg.Wait()
		size = h.Size()
		switch {
		case err != nil:
		case tailErr != nil:
			err = fmt.Errorf("read meta blocks of %s: %w", key, tailErr)
		case info.Size != size || int64(len(tail)) != min(guess, size):
			// Objects are immutable: a different length means the key
			// was replaced or damaged between the two answers.
			err = &CorruptError{Key: key, Err: ErrSize, Detail: fmt.Sprintf(
				"gave %d bytes for its last %d (object %d bytes, header counts %d)", len(tail), guess, info.Size, size)}
		}
	default:
		return Header{}, nil, 0, fmt.Errorf("read header of %s: %w: reader format %v", key, ErrFormat, f)
	}
	if err != nil {
		return Header{}, nil, 0, err
	}
	need := size - h.MetaOffset(0)
	if h.MetaBlocks == 0 {
		return h, nil, need, nil
	}
	if from := h.MetaOffset(0) - (size - int64(len(tail))); from >= 0 {
		// The tail holds the region: a copy of it, so that what a caller
		// keeps is the region alone, not the summary around it.
		return h, bytes.Clone(tail[from : from+h.MetaBytes()]), need, nil
	}
	meta, err := ReadMeta(ctx, st, key, h)
	return h, meta, need, err
}

// ReadSummary reads and decodes exactly the summary of the object at key
// (one ranged request; none when the object has no data blocks).
func ReadSummary(ctx context.Context, st staging.Store, key string, h Header) ([]SummaryEntry, error) {
	if h.DataBlocks == 0 {
		return nil, nil
	}
	b, info, err := st.Get(ctx, key, h.SummaryRange())
	if err != nil {
		return nil, fmt.Errorf("read summary of %s: %w", key, err)
	}
	if err := checkRegion(key, "summary", b, h.SummaryBytes(), info.Size, h); err != nil {
		return nil, err
	}
	s, err := DecodeSummary(b)
	if err != nil {
		return nil, withKey(err, key)
	}
	return s, nil
}

// checkRegion refuses a region read from an object that is no longer the one
// the header was read from (objects are immutable: a different length means
// the key was replaced or damaged).
func checkRegion(key, what string, b []byte, want, size int64, h Header) error {
	if size != h.Size() || int64(len(b)) != want {
		return &CorruptError{Key: key, Err: ErrSize, Detail: fmt.Sprintf(
			"gave %d bytes of %s, want %d (object %d bytes, header counts %d)", len(b), what, want, size, h.Size())}
	}
	return nil
}

// ReadHead reads and verifies a file's head object, embedded part 0
// included, with one request: a range of MaxHeadObjectBytes + 1 bytes, so
// that nothing larger is ever allocated and a larger object is refused. The
// returned info's ETag is what replacing the head with If-Match names.
func ReadHead(ctx context.Context, st staging.Store, key string, fileTag uint64) (Head, staging.ObjectInfo, error) {
	b, info, err := st.Get(ctx, key, staging.Bytes(0, MaxHeadObjectBytes+1))
	if errors.Is(err, staging.ErrInvalidRange) {
		// Only an empty object refuses a range from 0.
		return Head{}, info, &CorruptError{Key: key, Err: ErrSize, Detail: "is empty, shorter than a 128-byte head"}
	}
	if err != nil {
		return Head{}, info, fmt.Errorf("read head %s: %w", key, err)
	}
	if len(b) > MaxHeadObjectBytes || info.Size > MaxHeadObjectBytes {
		return Head{}, info, fmt.Errorf("read head %s: %w", key,
			&staging.TooLargeError{Key: key, Size: max(info.Size, int64(len(b))), Limit: MaxHeadObjectBytes})
	}
	hd, err := DecodeHead(b)
	if err != nil {
		return Head{}, info, withKey(err, key)
	}
	if hd.FileTag != fileTag {
		return Head{}, info, &CorruptError{Key: key, Err: ErrWrongObject,
			Detail: fmt.Sprintf("is the head of another file (tag %#016x, expected %#016x)", hd.FileTag, fileTag)}
	}
	return hd, info, nil
}
