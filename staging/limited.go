package staging

import (
	"context"
	"errors"
	"fmt"
)

// ErrTooLarge: an object is larger than its reader accepts. Anything read
// whole from the bucket is untrusted, so its reader bounds it first.
var ErrTooLarge = errors.New("object too large")

// TooLargeError is the error of GetLimited for an object over its limit.
// errors.Is(err, ErrTooLarge) holds.
type TooLargeError struct {
	Key   string
	Size  int64 // the object's size, as the store reported it
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, more than the %d its reader accepts: %v", TruncKey(e.Key), e.Size, e.Limit, ErrTooLarge)
}

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// probeBytes is what GetLimited reads first: every small object of ckptfs
// (heads, namespace entries, leases, descriptors) in one request.
const probeBytes = 64 << 10

// getLimitedAttempts bounds how often GetLimited starts over when the object
// is replaced between its requests.
const getLimitedAttempts = 3

// GetLimited reads the object at key whole, if it is at most limit bytes;
// a larger one fails with a *TooLargeError, with no more than a small first
// read allocated. It reads the first min(limit, 64 KiB) bytes, which also
// gives the object's size; a larger object within the limit is read on in
// a second request, and if it was replaced in between (its ETag changed) the
// read starts over. The info is the object's, as Get returns it.
func GetLimited(ctx context.Context, st Store, key string, limit int64) ([]byte, ObjectInfo, error) {
	if limit < 0 {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: negative limit %d", TruncKey(key), limit)
	}
	for range getLimitedAttempts {
		// One byte over the limit is enough to tell it is over, even from a
		// store that reports no size.
		b, info, err := st.Get(ctx, key, Bytes(0, min(limit+1, probeBytes)))
		if errors.Is(err, ErrInvalidRange) {
			// A range from 0 is unsatisfiable only for an empty object.
			h, herr := st.Head(ctx, key)
			if herr != nil {
				return nil, ObjectInfo{}, herr
			}
			if h.Size == 0 {
				return []byte{}, h, nil
			}
			continue // written since
		}
		if err != nil {
			return nil, ObjectInfo{}, err
		}
		size := max(info.Size, int64(len(b)))
		if size > limit {
			return nil, info, &TooLargeError{Key: key, Size: size, Limit: limit}
		}
		if int64(len(b)) == size {
			return b, info, nil
		}
		rest, info2, err := st.Get(ctx, key, Bytes(int64(len(b)), size-int64(len(b))))
		if err != nil && !errors.Is(err, ErrInvalidRange) {
			return nil, ObjectInfo{}, err
		}
		if err != nil || info2.ETag != info.ETag || info2.Size != info.Size {
			continue // replaced (or shortened) between the two reads
		}
		if int64(len(b)+len(rest)) != size {
			return nil, ObjectInfo{}, fmt.Errorf("get %s: read %d bytes of a %d-byte object", TruncKey(key), len(b)+len(rest), size)
		}
		whole := make([]byte, size)
		copy(whole[copy(whole, b):], rest)
		return whole, info2, nil
	}
	return nil, ObjectInfo{}, fmt.Errorf("get %s: replaced %d times while being read", TruncKey(key), getLimitedAttempts)
}
