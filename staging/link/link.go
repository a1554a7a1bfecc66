// Package link wraps a staging.Store in an emulated network link (latency
// and bandwidth), so that benchmarks on memory see the costs of a real
// bucket. Profile names the links measured.
package link

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// Profile describes an emulated network link to object storage.
// Bandwidths are in bytes per second (MB = 10^6 bytes); zero means unlimited.
type Profile struct {
	Name string
	// Latency is paid once per request.
	Latency time.Duration
	// PerRequestBps caps the payload rate of one request.
	PerRequestBps float64
	// TotalBps caps the payload rate of all requests in flight together.
	TotalBps float64
}

// The project's reference links (DESIGN.md, "How we measure"): results of
// benchmarks compare across the project only with these numbers.
var (
	// ProfileDirectory is an S3 directory bucket in the same zone.
	ProfileDirectory = Profile{Name: "directory", Latency: 3 * time.Millisecond, PerRequestBps: 200e6, TotalBps: 800e6}
	// ProfileGeneral is an S3 general purpose bucket in the same region.
	ProfileGeneral = Profile{Name: "general", Latency: 30 * time.Millisecond, PerRequestBps: 90e6, TotalBps: 450e6}
	// ProfileNone adds no delay.
	ProfileNone = Profile{Name: "none"}
)

// ProfileByName returns the profile named name: "directory", "general"
// or "none".
func ProfileByName(name string) (Profile, error) {
	for _, p := range []Profile{ProfileDirectory, ProfileGeneral, ProfileNone} {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown link profile %q (known: directory, general, none)", name)
}

// Store is a staging.Store that delays requests to another as a network link
// would. Each request pays the latency once; its payload (the bytes sent by
// Put and UploadPart, the bytes returned by Get) then moves at the lesser of
// the per-request bandwidth and its share of the total bandwidth.
//
// The total is shared fairly by a virtual clock: the link is free again at
// next; each request moves its payload in chunks, reserving for each chunk
// the next chunk/TotalBps of link time, so that requests in flight take
// turns chunk by chunk. A request also paces itself at PerRequestBps, and
// sleeps until both its own pace and its reservation allow the chunk.
// Reservations are made when they are needed, never banked: an idle link
// gives no burst later. A busy link's reservation may start up to
// linkCatchUp in the past (a request that woke late), never before the
// link's free time.
//
// A context ended during the delay returns its error; a Put or UploadPart
// then never reaches the inner store.
type Store struct {
	inner staging.Store
	p     Profile

	mu     sync.Mutex
	next   time.Time // GUARDED_BY(mu); when the shared link is free
	active int       // GUARDED_BY(mu); requests moving their payload
}

var _ staging.Store = (*Store)(nil)

// linkChunk is the unit of bandwidth sharing: small enough to interleave
// requests finely, large enough that pacing does not cost much CPU.
const linkChunk = 256 << 10

// linkCatchUp is how far in the past a busy link's next chunk may be
// reserved. A request wakes from its sleep a little late (more so on a
// loaded machine, behind a FUSE mount's own work), and when every request
// in flight was asleep past the link's free time, starting the next chunk
// at now threw that time away: with 16 GETs of 4 MiB in flight through a
// mount on the general link, 4 to 14% of the link was lost so, and the
// emulated link carried less than its TotalBps. A real link's buffers
// absorb such hiccups. The reservation is never earlier than the link's
// free time, so the total still never exceeds TotalBps from the first
// request; and an idle link (a request's first chunk with no other
// request moving) still starts at now: no burst.
const linkCatchUp = 2 * time.Millisecond

// linkSlack is how far behind its schedule a transfer may fall before it
// sleeps; the final sleep is exact, so totals keep their lower bound.
const linkSlack = time.Millisecond

// New wraps inner with an emulated link.
func New(inner staging.Store, p Profile) *Store { return &Store{inner: inner, p: p} }

// Profile is the link's profile.
func (l *Store) Profile() Profile { return l.p }

func rateDur(n int, bps float64) time.Duration {
	if bps <= 0 {
		return 0
	}
	return time.Duration(float64(n) / bps * float64(time.Second))
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// delay pays the latency of one request and moves n payload bytes.
func (l *Store) delay(ctx context.Context, op staging.Op, key string, n int) error {
	if err := l.wait(ctx, n); err != nil {
		return fmt.Errorf("link %s: %s %s: %w", l.p.Name, op, staging.TruncKey(key), err)
	}
	return nil
}

func (l *Store) wait(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sleepUntil(ctx, time.Now().Add(l.p.Latency)); err != nil {
		return err
	}
	if l.p.PerRequestBps <= 0 && l.p.TotalBps <= 0 {
		return nil
	}
	l.mu.Lock()
	l.active++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.active--
		l.mu.Unlock()
	}()
	own := time.Now() // when this request's own pace allows its next chunk
	var target time.Time
	for moved := 0; moved < n; {
		c := min(linkChunk, n-moved)
		own = own.Add(rateDur(c, l.p.PerRequestBps))
		target = own
		if l.p.TotalBps > 0 {
			l.mu.Lock()
			start := l.next
			now := time.Now()
			floor := now
			if moved > 0 || l.active > 1 {
				floor = now.Add(-linkCatchUp)
			}
			if start.Before(floor) {
				start = floor
			}
			l.next = start.Add(rateDur(c, l.p.TotalBps))
			if l.next.After(target) {
				target = l.next
			}
			l.mu.Unlock()
		}
		moved += c
		if moved < n && time.Until(target) < linkSlack {
			continue
		}
		if err := sleepUntil(ctx, target); err != nil {
			return err
		}
	}
	return nil
}

func (l *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := l.delay(ctx, staging.OpPut, key, len(data)); err != nil {
		return staging.ObjectInfo{}, err
	}
	return l.inner.Put(ctx, key, data, opts)
}

func (l *Store) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	if err := l.delay(ctx, staging.OpPut, key, len(data)); err != nil {
		return staging.ObjectInfo{}, false, err
	}
	return staging.PutGiven(ctx, l.inner, key, data, opts)
}

func (l *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	data, info, err := l.inner.Get(ctx, key, r)
	if derr := l.delay(ctx, staging.OpGet, key, len(data)); derr != nil {
		return nil, staging.ObjectInfo{}, derr
	}
	return data, info, err
}

func (l *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := l.delay(ctx, staging.OpHead, key, 0); err != nil {
		return staging.ObjectInfo{}, err
	}
	return l.inner.Head(ctx, key)
}

func (l *Store) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	if err := l.delay(ctx, staging.OpList, prefix, 0); err != nil {
		return staging.ListPage{}, err
	}
	return l.inner.List(ctx, prefix, startAfter, max)
}

func (l *Store) Delete(ctx context.Context, key string) error {
	if err := l.delay(ctx, staging.OpDelete, key, 0); err != nil {
		return err
	}
	return l.inner.Delete(ctx, key)
}

func (l *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	if err := l.delay(ctx, staging.OpCreateMultipart, key, 0); err != nil {
		return "", err
	}
	return l.inner.CreateMultipart(ctx, key, opts)
}

func (l *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := l.delay(ctx, staging.OpUploadPart, key, len(data)); err != nil {
		return "", err
	}
	return l.inner.UploadPart(ctx, key, uploadID, n, data)
}

var _ staging.PartKeeper = (*Store)(nil)

func (l *Store) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (string, bool, error) {
	if err := l.delay(ctx, staging.OpUploadPart, key, len(data)); err != nil {
		return "", false, err
	}
	return staging.UploadPartGiven(ctx, l.inner, key, uploadID, n, data)
}

func (l *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if err := l.delay(ctx, staging.OpCompleteMultipart, key, 0); err != nil {
		return staging.ObjectInfo{}, err
	}
	return l.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
}

func (l *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := l.delay(ctx, staging.OpAbortMultipart, key, 0); err != nil {
		return err
	}
	return l.inner.AbortMultipart(ctx, key, uploadID)
}

func (l *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	if err := l.delay(ctx, staging.OpListUploads, prefix, 0); err != nil {
		return nil, err
	}
	return l.inner.ListMultipartUploads(ctx, prefix)
}
