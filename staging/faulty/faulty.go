// Package faulty wraps a staging.Store to fail chosen requests, by Rules
// added and removed while it runs: an error, a hang, or an answer lost
// after the request was applied. Tests of every layer above staging use it
// to reach the paths that real outages take.
package faulty

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/ckptfs/ckptfs/staging"
)

// ErrInjected marks every error a Store makes up. It stands for a
// server error (S3's 500 or 503): the request may be retried.
var ErrInjected = errors.New("injected fault")

// Kind is what an injected fault does.
type Kind uint8

const (
	// Error fails the request without applying it.
	Error Kind = iota
	// Timeout hangs the request, not applied, until Rule.Delay passes
	// (or forever if Delay is 0) or ctx ends. Its error always matches
	// ErrInjected; it also matches context.DeadlineExceeded when the delay
	// passed (a client-side timeout), or ctx.Err() when ctx ended first.
	Timeout
	// LostAnswer applies the request to the inner store, then fails
	// it: the caller cannot tell whether it happened.
	LostAnswer
)

func (k Kind) String() string {
	switch k {
	case Error:
		return "error"
	case Timeout:
		return "timeout"
	case LostAnswer:
		return "lost answer"
	}
	return fmt.Sprintf("fault(%d)", uint8(k))
}

// Rule selects requests to fail. A request matches when its operation and
// key match every selector set; of the matching requests, the rule fires on
// the Nth if Nth is set, else on a random Fraction if that is set, else on
// every one; Times, if set, caps how often it fires. The key of List and
// ListMultipartUploads is their prefix.
type Rule struct {
	Op        staging.Op // OpAny: every operation
	KeyPrefix string     // "" matches every key
	KeySuffix string     // "" matches every key
	// Match, if set, must also hold; it runs with the Store's lock held and
	// must not call the Store.
	Match func(key string) bool

	Nth      int     // > 0: only the Nth matching request (1-based)
	Fraction float64 // in (0, 1]: each matching request with this probability
	Times    int     // > 0: fire at most this often

	Kind  Kind
	Delay time.Duration // Timeout: how long to hang; 0 until ctx ends
}

func (r *Rule) matches(op staging.Op, key string) bool {
	return (r.Op == staging.OpAny || r.Op == op) &&
		strings.HasPrefix(key, r.KeyPrefix) && strings.HasSuffix(key, r.KeySuffix) &&
		(r.Match == nil || r.Match(key))
}

// RuleID names an added rule for Remove.
type RuleID int

type ruleState struct {
	id    RuleID
	rule  Rule
	seen  int // matching requests
	fired int
}

// InjectedError is the error of an injected fault. errors.Is(err,
// ErrInjected) holds for every one; see Timeout for what else a
// timeout matches.
type InjectedError struct {
	Op    staging.Op
	Key   string
	Kind  Kind
	cause error
}

func (e *InjectedError) Error() string {
	s := fmt.Sprintf("%s %s: injected %s", e.Op, staging.TruncKey(e.Key), e.Kind)
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

func (e *InjectedError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrInjected, e.cause}
	}
	return []error{ErrInjected}
}

// Store is a staging.Store that fails chosen requests to another, by rules
// added and removed while it runs. With a given seed and the same sequence of
// requests, the same requests fail.
type Store struct {
	inner staging.Store

	mu       sync.Mutex
	rng      *rand.Rand   // GUARDED_BY(mu)
	rules    []*ruleState // GUARDED_BY(mu); checked in the order added
	nextID   RuleID       // GUARDED_BY(mu)
	injected int          // GUARDED_BY(mu)
}

var _ staging.Store = (*Store)(nil)

// New wraps inner; seed drives the Fraction rules.
func New(inner staging.Store, seed int64) *Store {
	return &Store{inner: inner, rng: rand.New(rand.NewPCG(uint64(seed), 0x636b707466730001))}
}

// Add adds a rule and returns its id.
func (f *Store) Add(r Rule) RuleID {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.rules = append(f.rules, &ruleState{id: f.nextID, rule: r})
	return f.nextID
}

// Remove removes a rule; it reports whether the rule was there.
func (f *Store) Remove(id RuleID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.id == id {
			f.rules = append(f.rules[:i], f.rules[i+1:]...)
			return true
		}
	}
	return false
}

// Clear removes every rule.
func (f *Store) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Injected is how many faults were injected so far.
func (f *Store) Injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// decide returns the rule that fires for a request, if any. Every matching
// rule counts the request; the first that fires wins.
func (f *Store) decide(op staging.Op, key string) (Rule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var fire *ruleState
	for _, r := range f.rules {
		if !r.rule.matches(op, key) {
			continue
		}
		r.seen++
		var hit bool
		switch {
		case r.rule.Nth > 0:
			hit = r.seen == r.rule.Nth
		case r.rule.Fraction > 0:
			hit = f.rng.Float64() < r.rule.Fraction
		default:
			hit = true
		}
		if hit && (r.rule.Times <= 0 || r.fired < r.rule.Times) && fire == nil {
			fire = r
		}
	}
	if fire == nil {
		return Rule{}, false
	}
	fire.fired++
	f.injected++
	return fire.rule, true
}

// do runs call unless a rule fires: then it fails as the rule says (calling
// call first for a lost answer). call stores its results; on failure the
// caller returns zero values.
func (f *Store) do(ctx context.Context, op staging.Op, key string, call func() error) error {
	r, ok := f.decide(op, key)
	if !ok {
		return call()
	}
	e := &InjectedError{Op: op, Key: key, Kind: r.Kind}
	switch r.Kind {
	case LostAnswer:
		_ = call()
	case Timeout:
		if r.Delay > 0 {
			e.cause = context.DeadlineExceeded
			if err := sleep(ctx, r.Delay); err != nil {
				e.cause = err
			}
		} else {
			<-ctx.Done()
			e.cause = ctx.Err()
		}
	}
	return e
}

func (f *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	var info staging.ObjectInfo
	err := f.do(ctx, staging.OpPut, key, func() (err error) { info, err = f.inner.Put(ctx, key, data, opts); return })
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	return info, nil
}

func (f *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	var data []byte
	var info staging.ObjectInfo
	err := f.do(ctx, staging.OpGet, key, func() (err error) { data, info, err = f.inner.Get(ctx, key, r); return })
	if err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	return data, info, nil
}

func (f *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	var info staging.ObjectInfo
	err := f.do(ctx, staging.OpHead, key, func() (err error) { info, err = f.inner.Head(ctx, key); return })
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	return info, nil
}

func (f *Store) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	var page staging.ListPage
	err := f.do(ctx, staging.OpList, prefix, func() (err error) { page, err = f.inner.List(ctx, prefix, startAfter, max); return })
	if err != nil {
		return staging.ListPage{}, err
	}
	return page, nil
}

func (f *Store) Delete(ctx context.Context, key string) error {
	return f.do(ctx, staging.OpDelete, key, func() error { return f.inner.Delete(ctx, key) })
}

func (f *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	var id string
	err := f.do(ctx, staging.OpCreateMultipart, key, func() (err error) { id, err = f.inner.CreateMultipart(ctx, key, opts); return })
	if err != nil {
		return "", err
	}
	return id, nil
}

func (f *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	var etag string
	err := f.do(ctx, staging.OpUploadPart, key, func() (err error) { etag, err = f.inner.UploadPart(ctx, key, uploadID, n, data); return })
	if err != nil {
		return "", err
	}
	return etag, nil
}

var _ staging.PartKeeper = (*Store)(nil)

// PutKept reports kept as UploadPartKept does.
func (f *Store) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	var info staging.ObjectInfo
	var kept bool
	err := f.do(ctx, staging.OpPut, key, func() (err error) {
		info, kept, err = staging.PutGiven(ctx, f.inner, key, data, opts)
		return
	})
	if err != nil {
		return staging.ObjectInfo{}, kept, err
	}
	return info, kept, nil
}

// UploadPartKept reports kept as the store below did, even when the answer
// is then lost: the part is stored, and its body with it.
func (f *Store) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (string, bool, error) {
	var etag string
	var kept bool
	err := f.do(ctx, staging.OpUploadPart, key, func() (err error) {
		etag, kept, err = staging.UploadPartGiven(ctx, f.inner, key, uploadID, n, data)
		return
	})
	if err != nil {
		return "", kept, err
	}
	return etag, kept, nil
}

func (f *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	var info staging.ObjectInfo
	err := f.do(ctx, staging.OpCompleteMultipart, key, func() (err error) {
		info, err = f.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
		return
	})
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	return info, nil
}

func (f *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	return f.do(ctx, staging.OpAbortMultipart, key, func() error { return f.inner.AbortMultipart(ctx, key, uploadID) })
}

func (f *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	var ups []staging.Upload
	err := f.do(ctx, staging.OpListUploads, prefix, func() (err error) { ups, err = f.inner.ListMultipartUploads(ctx, prefix); return })
	if err != nil {
		return nil, err
	}
	return ups, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
