// Package limit wraps a staging.Store to bound the requests it has in flight
// at once, over every caller: the mount-wide cap of the max_requests option
// (mountpoint-s3's --max-threads), where segment_mpu_max_concurrency bounds
// only one file's. A request beyond the cap waits for a slot; one whose
// context ends while it waits gives up with the context's error, wrapped
// with what it was doing, and never reaches the store.
package limit

import (
	"context"
	"fmt"

	"golang.org/x/sync/semaphore"

	"github.com/ckptfs/ckptfs/staging"
)

// Store is a staging.Store that passes at most Max requests at once to
// another. Answers and errors pass through unchanged.
type Store struct {
	inner staging.Store
	max   int
	sem   *semaphore.Weighted
}

var _ staging.Store = (*Store)(nil)

// New wraps inner so that at most max requests are in flight at once; max
// must be at least 1 (the caller, not the request, decides that 0 means no
// wrapper at all).
func New(inner staging.Store, max int) *Store {
	if max < 1 {
		max = 1
	}
	return &Store{inner: inner, max: max, sem: semaphore.NewWeighted(int64(max))}
}

// Max is the cap.
func (s *Store) Max() int { return s.max }

// Inner is the store wrapped.
func (s *Store) Inner() staging.Store { return s.inner }

// acquire takes a slot for op on key, or fails with ctx's error when ctx
// ends first.
func (s *Store) acquire(ctx context.Context, op staging.Op, key string) error {
	if err := s.sem.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("%s %s: wait for one of max_requests=%d slots: %w", op, key, s.max, err)
	}
	return nil
}

func (s *Store) release() { s.sem.Release(1) }

func (s *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := s.acquire(ctx, staging.OpPut, key); err != nil {
		return staging.ObjectInfo{}, err
	}
	defer s.release()
	return s.inner.Put(ctx, key, data, opts)
}

func (s *Store) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	if err := s.acquire(ctx, staging.OpPut, key); err != nil {
		return staging.ObjectInfo{}, false, err
	}
	defer s.release()
	return staging.PutGiven(ctx, s.inner, key, data, opts)
}

func (s *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := s.acquire(ctx, staging.OpGet, key); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	defer s.release()
	return s.inner.Get(ctx, key, r)
}

func (s *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := s.acquire(ctx, staging.OpHead, key); err != nil {
		return staging.ObjectInfo{}, err
	}
	defer s.release()
	return s.inner.Head(ctx, key)
}

func (s *Store) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	if err := s.acquire(ctx, staging.OpList, prefix); err != nil {
		return staging.ListPage{}, err
	}
	defer s.release()
	return s.inner.List(ctx, prefix, startAfter, max)
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.acquire(ctx, staging.OpDelete, key); err != nil {
		return err
	}
	defer s.release()
	return s.inner.Delete(ctx, key)
}

func (s *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	if err := s.acquire(ctx, staging.OpCreateMultipart, key); err != nil {
		return "", err
	}
	defer s.release()
	return s.inner.CreateMultipart(ctx, key, opts)
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := s.acquire(ctx, staging.OpUploadPart, key); err != nil {
		return "", err
	}
	defer s.release()
	return s.inner.UploadPart(ctx, key, uploadID, n, data)
}

var _ staging.PartKeeper = (*Store)(nil)

func (s *Store) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (string, bool, error) {
	if err := s.acquire(ctx, staging.OpUploadPart, key); err != nil {
		return "", false, err
	}
	defer s.release()
	return staging.UploadPartGiven(ctx, s.inner, key, uploadID, n, data)
}

func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if err := s.acquire(ctx, staging.OpCompleteMultipart, key); err != nil {
		return staging.ObjectInfo{}, err
	}
	defer s.release()
	return s.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := s.acquire(ctx, staging.OpAbortMultipart, key); err != nil {
		return err
	}
	defer s.release()
	return s.inner.AbortMultipart(ctx, key, uploadID)
}

func (s *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	if err := s.acquire(ctx, staging.OpListUploads, prefix); err != nil {
		return nil, err
	}
	defer s.release()
	return s.inner.ListMultipartUploads(ctx, prefix)
}
