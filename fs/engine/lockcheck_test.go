package engine

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ckptfs/ckptfs/staging"
)

// The rule "no store request under File.mu" (doc.go, Locking), checked: a
// lockCheckStore serves one File and calls report for every request made
// while that File's mu is held, by anyone. "By anyone" is what catches a
// hold that waits for a request another goroutine makes (a flush's upload
// workers, a read's flight); it is exact where one operation runs at a time,
// as in TestNoStoreRequestUnderMu, and may blame a request that merely met
// another operation's hold where operations run at once (the survey).

// lockCheckStore is a store for one File (f) that reports each request made
// while f.mu is held. A lockCheckStore with no File, given to Create or
// Open, is a template: the File is given a copy bound to it (testHooks.store).
type lockCheckStore struct {
	staging.Store
	f *File
	// armed: check requests now (a test checks one operation, not its
	// setup); nil: always.
	armed *atomic.Bool
	// report is called with the request and the stack of its goroutine.
	report func(op, stack string)
}

// forFile returns a copy of the template s that serves f.
func (s *lockCheckStore) forFile(f *File) *lockCheckStore {
	c := *s
	c.f = f
	return &c
}

func (s *lockCheckStore) check(op string) {
	if s.f == nil || (s.armed != nil && !s.armed.Load()) || !s.f.mu.held() {
		return
	}
	buf := make([]byte, 64<<10)
	s.report(op, string(buf[:runtime.Stack(buf, false)]))
}

func (s *lockCheckStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	s.check("Put " + key)
	return s.Store.Put(ctx, key, data, opts)
}

func (s *lockCheckStore) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, bool, error) {
	s.check("Put " + key)
	return staging.PutGiven(ctx, s.Store, key, data, opts)
}

func (s *lockCheckStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	s.check("Get " + key)
	return s.Store.Get(ctx, key, r)
}

func (s *lockCheckStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	s.check("Head " + key)
	return s.Store.Head(ctx, key)
}

func (s *lockCheckStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	s.check("List " + prefix)
	return s.Store.List(ctx, prefix, startAfter, max)
}

func (s *lockCheckStore) Delete(ctx context.Context, key string) error {
	s.check("Delete " + key)
	return s.Store.Delete(ctx, key)
}

func (s *lockCheckStore) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	s.check("CreateMultipart " + key)
	return s.Store.CreateMultipart(ctx, key, opts)
}

func (s *lockCheckStore) UploadPart(ctx context.Context, key, id string, n int32, data []byte) (string, error) {
	s.check("UploadPart " + key)
	return s.Store.UploadPart(ctx, key, id, n, data)
}

func (s *lockCheckStore) UploadPartKept(ctx context.Context, key, id string, n int32, data []byte) (string, bool, error) {
	s.check("UploadPart " + key)
	return staging.UploadPartGiven(ctx, s.Store, key, id, n, data)
}

func (s *lockCheckStore) CompleteMultipart(ctx context.Context, key, id string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	s.check("CompleteMultipart " + key)
	return s.Store.CompleteMultipart(ctx, key, id, parts, cond)
}

func (s *lockCheckStore) AbortMultipart(ctx context.Context, key, id string) error {
	s.check("AbortMultipart " + key)
	return s.Store.AbortMultipart(ctx, key, id)
}

func (s *lockCheckStore) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	s.check("ListMultipartUploads " + prefix)
	return s.Store.ListMultipartUploads(ctx, prefix)
}

var _ staging.PartKeeper = (*lockCheckStore)(nil)

// engineFrames is the stack's frames in the project's code (not its tests
// or the staging package and its wrappers), innermost first, as "function
// file:line": the engine's, and those of the packages it calls (wal,
// writermark, blockmap, segment) that make requests for it.
func engineFrames(stack string) []string {
	const mod = "github.com/ckptfs/ckptfs/"
	var out []string
	lines := strings.Split(stack, "\n")
	for i := 1; i+1 < len(lines); i += 2 {
		fn, loc := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1])
		inEngine := strings.Contains(loc, "/fs/engine/")
		if !strings.HasPrefix(strings.TrimPrefix(fn, "created by "), mod) ||
			strings.Contains(fn, mod+"staging") || strings.Contains(loc, "_test.go") {
			continue
		}
		if j := strings.LastIndex(fn, "("); j > 0 && !strings.HasPrefix(fn, "created by") {
			fn = fn[:j]
		}
		fn = strings.Replace(fn, mod, "", 1)
		fn = strings.Replace(fn, "fs/engine.", "", 1)
		if j := strings.LastIndex(loc, "/"); j >= 0 {
			loc = loc[j+1:]
		}
		if j := strings.Index(loc, " "); j >= 0 {
			loc = loc[:j]
		}
		if j := strings.Index(fn, " in goroutine "); j > 0 {
			fn = fn[:j]
		}
		f := fn + " " + loc
		if !inEngine && len(out) > 0 {
			continue // only where another package's code asked first
		}
		if len(out) > 0 && out[len(out)-1] == f {
			continue // recursion
		}
		out = append(out, f)
	}
	return out
}

// lockSurvey, with -lockcheck.survey, checks the store of every File the
// tests make and prints, at the end, every engine call path that made a
// request under File.mu, with counts.
var lockSurvey = flag.Bool("lockcheck.survey", false, "print every engine path that makes a store request while File.mu is held")

type surveyTally struct {
	mu    sync.Mutex
	paths map[string]int
	ops   map[string]map[string]int
}

var survey = surveyTally{paths: map[string]int{}, ops: map[string]map[string]int{}}

func (s *surveyTally) add(op, stack string) {
	path := strings.Join(engineFrames(stack), "\n\t")
	if i := strings.Index(op, " "); i > 0 {
		op = op[:i]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths[path]++
	if s.ops[path] == nil {
		s.ops[path] = map[string]int{}
	}
	s.ops[path][op]++
}

func (s *surveyTally) print() {
	s.mu.Lock()
	defer s.mu.Unlock()
	paths := make([]string, 0, len(s.paths))
	for p := range s.paths {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return s.paths[paths[i]] > s.paths[paths[j]] })
	fmt.Fprintf(os.Stderr, "store requests under File.mu: %d paths\n", len(paths))
	for _, p := range paths {
		fmt.Fprintf(os.Stderr, "%d %v\n\t%s\n", s.paths[p], s.ops[p], p)
	}
}

// installLockChecks sets the package's test hooks (TestMain).
func installLockChecks() {
	testHooks.unlocking = checkAtUnlock
	testHooks.store = func(f *File, st staging.Store) staging.Store {
		if lc, ok := st.(*lockCheckStore); ok {
			return lc.forFile(f)
		}
		if *lockSurvey {
			return &lockCheckStore{Store: st, f: f, report: survey.add}
		}
		return st
	}
}

// unlockChecks counts the exclusive holds of File.mu ended, for sampling.
var unlockChecks atomic.Uint64

// invariantSample is the dirty blocks a check at unlock walks per hold, on
// average: a file with more is checked at one hold in len(dirty)/this, so a
// test of many blocks does not walk them all at every unlock.
const invariantSample = 256

// checkAtUnlock checks f's invariants at the end of an exclusive hold of
// its mu, as gcsfuse's InvariantMutex does: a broken invariant panics there,
// with the stack of the critical section that broke it (the hold's own
// goroutine, mu still held).
func checkAtUnlock(f *File) {
	if f.noUnlockChecks {
		return // a benchmark of waits, which checks between its steps
	}
	n := unlockChecks.Add(1)
	if d := uint64(len(f.dirty)); d > invariantSample && n%(d/invariantSample) != 0 {
		return
	}
	if err := f.checkInvariantsLocked(); err != nil {
		panic(fmt.Sprintf("file %s: invariant broken at the end of a hold of File.mu: %v", f.prefix, err))
	}
}
