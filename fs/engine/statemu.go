package engine

import (
	"sync"
	"sync/atomic"

	"github.com/ckptfs/ckptfs/staging"
)

// stateMu is File.mu. Every exclusive hold ends in Unlock, which publishes
// the file's Stat before letting go: the snapshot is always the state some
// critical section left, never one in the middle of a change, and a write
// that has returned is in it.
//
// It counts its holders, so that whether it is held can be asked (held):
// the package's tests fail a store request made while the file's mu is held
// (lockcheck_test.go), which is how the rule "no store request under
// File.mu" (doc.go, Locking) is checked. The count is one atomic add per
// lock and per unlock, on the mutex's own cache line.
type stateMu struct {
	rw sync.RWMutex
	f  *File // set once by newFile
	// holders is the readers holding rw, or 1 for its writer.
	holders atomic.Int32
}

// Lock takes mu exclusively.
func (m *stateMu) Lock() {
	m.rw.Lock()
	m.holders.Add(1)
}

// Unlock publishes the stat, then releases the lock.
func (m *stateMu) Unlock() {
	m.f.publishStatLocked()
	if h := testHooks.unlocking; h != nil {
		h(m.f)
	}
	m.holders.Add(-1)
	m.rw.Unlock()
}

// RLock takes mu shared.
func (m *stateMu) RLock() {
	m.rw.RLock()
	m.holders.Add(1)
}

// TryRLock takes mu shared if it can without waiting.
func (m *stateMu) TryRLock() bool {
	if !m.rw.TryRLock() {
		return false
	}
	m.holders.Add(1)
	return true
}

// RUnlock releases a shared hold.
func (m *stateMu) RUnlock() {
	m.holders.Add(-1)
	m.rw.RUnlock()
}

// held says whether anyone holds mu now, shared or exclusively. It is a
// moment's answer, for checks that run while no other operation can take
// or release mu.
func (m *stateMu) held() bool { return m.holders.Load() != 0 }

// testHooks are set by the package's tests (TestMain) before any File is
// made and never changed after; nil in production, where each costs one
// load of a nil func.
var testHooks struct {
	// store returns the store a new File uses in place of st.
	store func(f *File, st staging.Store) staging.Store
	// unlocking runs at the end of every exclusive hold of File.mu, before
	// it is released (the invariant check, invariants.go).
	unlocking func(f *File)
}
