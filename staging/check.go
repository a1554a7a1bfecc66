package staging

import (
	"context"
	"fmt"
	"slices"
)

// The checks below are what every backend does before it touches storage,
// in one place so that a request refused by one backend is refused by all,
// with the same error.

// MaxListKeys is the most keys one List returns (S3's page).
const MaxListKeys = 1000

// CheckPrefix is the preamble of every listing (List, ListMultipartUploads):
// ctx still live and a prefix that some key may start with. op names the
// listing in the error ("list", "s3 list multipart uploads").
func CheckPrefix(ctx context.Context, op, prefix string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, prefix, err)
	}
	if err := ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// CheckList is the preamble of every List: CheckPrefix, then the number of
// keys the page may hold, max as Store.List reads it (max <= 0 or over
// MaxListKeys: MaxListKeys).
func CheckList(ctx context.Context, op, prefix string, max int) (int, error) {
	if err := CheckPrefix(ctx, op, prefix); err != nil {
		return 0, err
	}
	if max <= 0 || max > MaxListKeys {
		max = MaxListKeys
	}
	return max, nil
}

// CheckConditions decides a conditional write given whether the key exists
// and (lazily) its current ETag.
func CheckConditions(cond Conditions, exists bool, etag func() string) error {
	if cond.IfNoneMatch && exists {
		return fmt.Errorf("If-None-Match: the key exists: %w", ErrPrecondition)
	}
	if cond.IfMatch != "" {
		if !exists {
			return fmt.Errorf("If-Match %s: no such key: %w", cond.IfMatch, ErrPrecondition)
		}
		if cur := etag(); cur != cond.IfMatch {
			return fmt.Errorf("If-Match %s: the ETag is %s: %w", cond.IfMatch, cur, ErrPrecondition)
		}
	}
	return nil
}

// CheckWrite is the validation common to every write of every backend.
func CheckWrite(ctx context.Context, op, key string, md map[string]string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, TruncKey(key), err)
	}
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := ValidateMetadata(md); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return nil
}

// CheckRead is the validation common to every read of every backend.
func CheckRead(ctx context.Context, op, key string) error {
	return CheckWrite(ctx, op, key, nil)
}

// SortUploads orders uploads as S3 lists them: by key, then by initiation.
func SortUploads(us []Upload) {
	slices.SortFunc(us, func(a, b Upload) int {
		if a.Key != b.Key {
			if a.Key < b.Key {
				return -1
			}
			return 1
		}
		if c := a.Initiated.Compare(b.Initiated); c != 0 {
			return c
		}
		if a.UploadID < b.UploadID {
			return -1
		}
		if a.UploadID > b.UploadID {
			return 1
		}
		return 0
	})
}
