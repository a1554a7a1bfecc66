package wal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// OwnerInfo is the content of the owner object: who holds the lease.
type OwnerInfo struct {
	Version int       // of the owner format: 1 (no "v", no pid namespace) or OwnerVersion
	Writer  string    // random id of the log
	Host    string    // os.Hostname
	PID     int       // os.Getpid, in the writer's PID namespace
	PIDNS   uint64    // inode of the writer's PID namespace (/proc/self/ns/pid; 0 if unknown)
	Start   uint64    // when the process started, in clock ticks since boot (0 if unknown)
	Boot    string    // the kernel's boot id ("" if unknown)
	Expires time.Time // the lease is the writer's until then
	// Closing: the writer takes no more changes and lets the lease go once
	// what it logged is published (Log.Closing); another writer waits for
	// it (Options.BusyWait).
	Closing bool
}

// OwnerVersion is the version of the owner object this build writes. Version
// 1 (no "v" field) had no "pidns": its pid cannot be placed in a namespace,
// so its writer is never judged dead before its lease expires.
const OwnerVersion = 2

// ownerJSON is OwnerInfo on the wire.
type ownerJSON struct {
	V       int    `json:"v,omitempty"`
	Writer  string `json:"writer"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	PIDNS   uint64 `json:"pidns,omitempty"`
	Start   uint64 `json:"start,omitempty"`
	Boot    string `json:"boot"`
	Expires string `json:"expires"`
	Closing bool   `json:"closing,omitempty"`
}

// maxOwnerBytes bounds what parseOwner reads: a real owner is ~200 bytes.
const maxOwnerBytes = 64 << 10

// encodeOwner is the body of the owner object.
func encodeOwner(o OwnerInfo) []byte {
	v, pidns := o.Version, o.PIDNS
	if v == 0 {
		v = OwnerVersion
	}
	if v == 1 {
		v, pidns = 0, 0 // version 1 has neither "v" nor "pidns"
	}
	b, err := json.Marshal(ownerJSON{
		V:       v,
		Writer:  o.Writer,
		Host:    o.Host,
		PID:     o.PID,
		PIDNS:   pidns,
		Start:   o.Start,
		Boot:    o.Boot,
		Expires: o.Expires.UTC().Format(time.RFC3339Nano),
		Closing: o.Closing,
	})
	if err != nil {
		// Strings and an int always marshal.
		panic(fmt.Sprintf("encode wal owner: %v", err))
	}
	return b
}

// parseOwner parses the body of an owner object. Unknown fields are ignored
// (a newer build may add some); the writer, a pid a process can have and the
// expiry are required.
func parseOwner(b []byte) (OwnerInfo, error) {
	if len(b) > maxOwnerBytes {
		return OwnerInfo{}, fmt.Errorf("owner of %d bytes, at most %d", len(b), maxOwnerBytes)
	}
	var w ownerJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return OwnerInfo{}, fmt.Errorf("parse owner: %w", err)
	}
	if w.Writer == "" {
		return OwnerInfo{}, errors.New("owner names no writer")
	}
	// No "v" is version 1. A newer version is read for what it shares
	// with this one (who, until when), and its writer is never judged dead.
	if w.V < 0 {
		return OwnerInfo{}, fmt.Errorf("owner version %d", w.V)
	}
	version := max(w.V, 1)
	// A pid outside what a process can have must never reach kill(2): 0 and
	// negative values address process groups.
	if w.PID <= 0 || w.PID > math.MaxInt32 {
		return OwnerInfo{}, fmt.Errorf("owner pid %d", w.PID)
	}
	exp, err := time.Parse(time.RFC3339Nano, w.Expires)
	if err != nil {
		return OwnerInfo{}, fmt.Errorf("owner expiry: %w", err)
	}
	// Encoded in UTC, the expiry must stay a time RFC 3339 can write.
	if y := exp.UTC().Year(); y < 1 || y > 9999 {
		return OwnerInfo{}, fmt.Errorf("owner expiry %s out of range", w.Expires)
	}
	o := OwnerInfo{Version: version, Writer: w.Writer, Host: w.Host, PID: w.PID, PIDNS: w.PIDNS, Start: w.Start, Boot: w.Boot, Expires: exp, Closing: w.Closing}
	if version == 1 {
		o.PIDNS = 0 // version 1 places no pid: whatever it says is not read
	}
	return o, nil
}

// self is what identifies this process in a lease, and what it can tell of
// other processes.
type self struct {
	host  string
	pid   int
	pidns uint64 // 0: unknown, or /proc is not of our PID namespace
	start uint64
	boot  string
	look  func(pid int) procInfo // nil: lookProcess
}

func thisProcess() self {
	host, _ := os.Hostname() // "" never matches a stale owner's host check below
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	pid := os.Getpid()
	return self{host: host, pid: pid, pidns: pidNamespace(pid), start: processStart(pid), boot: strings.TrimSpace(string(boot))}
}

// pidNamespace returns the inode of this process's PID namespace, or 0 when
// /proc does not show that namespace: /proc/<pid> is then not how this
// process's pids are looked up (a process in a new PID namespace with the
// /proc of its parent's), and no pid can be judged through it.
func pidNamespace(pid int) uint64 {
	if self, err := os.Readlink("/proc/self"); err != nil || self != strconv.Itoa(pid) {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// procInfo is what the checker can tell of a pid in its own namespace.
type procInfo struct {
	gone  bool   // no process has the pid, or it is a zombie
	start uint64 // its start time when it runs (0: unknown)
}

// lookProcess tells what process pid is: gone when no process has it
// (ESRCH) or when it is a zombie, a process that died and that its parent
// has not reaped yet: it still has its pid, but runs no code and renews no
// lease (state 'Z', or 'X' while being reaped, field 3 of /proc/<pid>/stat).
// State and start time come from one read, so they are of one process.
func lookProcess(pid int) procInfo {
	if pid <= 0 || pid > math.MaxInt32 {
		return procInfo{}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		// ESRCH is certain; anything else (EPERM: another user's process) is not.
		return procInfo{gone: errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)}
	}
	state, start := parseStat(b)
	if state == 'Z' || state == 'X' {
		return procInfo{gone: true}
	}
	return procInfo{start: start}
}

// parseStat returns the state (field 3) and the start time (field 22) of a
// /proc/<pid>/stat, or zeros for what it cannot read. The command name,
// field 2, is in parentheses and may hold anything: fields are counted
// after the last ')'.
func parseStat(b []byte) (state byte, start uint64) {
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) > 0 && len(f[0]) == 1 {
		state = f[0][0]
	}
	if len(f) >= 20 {
		start, _ = strconv.ParseUint(f[19], 10, 64)
	}
	return state, start
}

// processStart returns when process pid started, in clock ticks since boot
// (field 22 of /proc/<pid>/stat), or 0 if it cannot tell. With the pid it
// names one process for the life of a boot: a pid is reused, a start time
// with it is not (a restarted container often gets the pid it had).
func processStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, start := parseStat(b)
	return start
}

// processState returns the state letter of process pid (field 3 of
// /proc/<pid>/stat), or 0 if it cannot tell.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	state, _ := parseStat(b)
	return state
}

// stale reports whether the lease o can be taken over by me at now.
func (me self) stale(o OwnerInfo, now time.Time) bool {
	return now.After(o.Expires) || me.gone(o)
}

// gone reports whether the writer of lease o is certainly dead. Only a
// lease of this build's version is judged, and only a writer whose pid
// means here what it meant to it: of this very boot of this host and of
// this PID namespace (two containers that share the host's network or UTS
// namespace share host name and boot id, and their pids name different
// processes). It must also have recorded its start time, and its pid must
// now name no process, a zombie, or a process started at another time (the
// pid was reused). Anything that cannot be verified (an old lease without
// a namespace or a start time, a /proc that cannot be read) is not proof:
// the lease is waited out.
func (me self) gone(o OwnerInfo) bool {
	if me.boot == "" || me.host == "" || me.pidns == 0 {
		return false // we cannot place anything
	}
	if o.Version != OwnerVersion || o.Boot != me.boot || o.Host != me.host || o.PIDNS != me.pidns || o.Start == 0 {
		return false // another machine, boot or namespace, or one we cannot tell apart
	}
	if o.PID == me.pid {
		// Our own pid: another log of this process (every Open has a new
		// writer id), which is live, unless it started at another time.
		return me.start != 0 && o.Start != me.start
	}
	look := me.look
	if look == nil {
		look = lookProcess
	}
	p := look(o.PID)
	return p.gone || (p.start != 0 && p.start != o.Start)
}

// Held reports whether the lease of the log under prefix is held by a
// writer that may be alive, without taking it (one GET). Unlike Open, it
// counts an expired lease as held unless its writer is known to be gone (a
// process of this boot of this host that ended): expiry says that a writer
// stopped renewing, not that it stopped writing (a store outage stops
// renewals too). A reader that must not act on a live writer's behalf
// (replay and publish its records) asks this first.
func Held(ctx context.Context, st staging.Store, prefix string) (bool, error) {
	key := prefix + Dir + OwnerName
	b, _, err := staging.GetLimited(ctx, st, key, maxOwnerBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read wal lease %s: %w", key, err)
	}
	o, err := parseOwner(b)
	if err != nil {
		return true, nil // cannot tell: held
	}
	return !thisProcess().gone(o), nil
}

func newWriterID() string {
	return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
}

// lease is the lease a Log holds. Its fields are used by Open and then only
// by the renewing goroutine, and by Close after that goroutine stopped.
type lease struct {
	st   staging.Store
	key  string
	me   self
	id   string
	ttl  time.Duration
	log  *zap.Logger
	etag string // of our last write of the owner object
	// sent is when our last write of the owner object that landed was
	// sent (this process's monotonic clock): the lease is provably ours
	// until sent plus validFor (see Log.valid).
	sent time.Time
	// closing is set by Log.Closing; every write of the owner object from
	// then on says so.
	closing atomic.Bool
}

// validFor is how long after the send of a write of the owner object that
// landed the writer counts the lease as its own, to acknowledge records by:
// two thirds of the TTL. A taker judges the lease expired by the expiry the
// write carried, the send time plus the TTL, on its own wall clock: the
// third left is the margin for the two clocks (see "Lease" in the package
// doc).
func (ls *lease) validFor() time.Duration { return ls.ttl - ls.ttl/3 }

func (ls *lease) body(now time.Time) []byte {
	return encodeOwner(OwnerInfo{Version: OwnerVersion, Writer: ls.id, Host: ls.me.host, PID: ls.me.pid, PIDNS: ls.me.pidns,
		Start: ls.me.start, Boot: ls.me.boot, Expires: now.Add(ls.ttl), Closing: ls.closing.Load()})
}

// busyGrace is how long a writer that finds the lease held by one not
// closing tries again before it gives up (with Options.BusyWait): the
// holder's last handle may have just been closed, its owner object not yet
// rewritten to say so (one request).
const busyGrace = time.Second

// takeWaiting is take, tried again while the holder is closing (for at most
// wait in all) or, for busyGrace, while it may be about to say so.
func (ls *lease) takeWaiting(ctx context.Context, wait time.Duration) error {
	start := time.Now()
	pause := 20 * time.Millisecond
	for {
		err := ls.take(ctx)
		var be *BusyError
		if !errors.As(err, &be) {
			return err
		}
		waited := time.Since(start)
		if waited >= wait || !be.Owner.Closing && waited >= busyGrace {
			return err
		}
		t := time.NewTimer(min(pause, wait-waited))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for a closing writer to let go of wal lease %s: %w", ls.key, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// busy builds the refusal of Open, reading the owner again when the caller
// does not have it (a create or replace lost a race): best effort.
func (ls *lease) busy(ctx context.Context, o *OwnerInfo) error {
	e := &BusyError{Key: ls.key}
	if o != nil {
		e.Owner = *o
		return e
	}
	if b, _, err := staging.GetLimited(ctx, ls.st, ls.key, maxOwnerBytes); err == nil {
		if o, err := parseOwner(b); err == nil {
			e.Owner = o
		}
	}
	return e
}

// take takes the lease or says why not.
func (ls *lease) take(ctx context.Context) error {
	b, info, err := staging.GetLimited(ctx, ls.st, ls.key, maxOwnerBytes)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		sent := time.Now()
		put, err := ls.st.Put(ctx, ls.key, ls.body(sent), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
		if err != nil {
			if etag, ok := ls.landed(ctx); ok {
				ls.etag, ls.sent = etag, sent
				return nil
			}
		}
		if errors.Is(err, staging.ErrPrecondition) {
			return ls.busy(ctx, nil) // another writer created it since our Get
		}
		if err != nil {
			return fmt.Errorf("create wal lease %s: %w", ls.key, err)
		}
		ls.etag, ls.sent = put.ETag, sent
		return nil
	case err != nil:
		return fmt.Errorf("read wal lease %s: %w", ls.key, err)
	}
	now := time.Now()
	o, perr := parseOwner(b)
	if perr != nil {
		// A live writer rewrites the object every TTL/3, so one that does not
		// parse and is older than a TTL has no writer renewing it.
		until := info.LastModified.Add(ls.ttl)
		if !now.After(until) {
			ls.log.Warn("wal lease does not parse; waiting for it to age", zap.String("key", ls.key), zap.Error(perr))
			return &BusyError{Key: ls.key, Owner: OwnerInfo{Expires: until}}
		}
	} else if !ls.me.stale(o, now) {
		return ls.busy(ctx, &o)
	}
	put, err := ls.st.Put(ctx, ls.key, ls.body(now), staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}})
	if err != nil {
		if etag, ok := ls.landed(ctx); ok {
			ls.etag, ls.sent = etag, now
			return nil
		}
	}
	if errors.Is(err, staging.ErrPrecondition) {
		return ls.busy(ctx, nil) // another writer took it since our Get
	}
	if err != nil {
		return fmt.Errorf("take over wal lease %s: %w", ls.key, err)
	}
	ls.log.Debug("took over a stale wal lease", zap.String("key", ls.key), zap.String("writer", o.Writer))
	ls.etag, ls.sent = put.ETag, now
	return nil
}

// landed says whether a write of the owner object that failed landed after
// all: a lost answer, resent by the client and then refused by our own
// object, leaves our writer id there. It returns the ETag to renew against.
func (ls *lease) landed(ctx context.Context) (string, bool) {
	b, info, err := staging.GetLimited(ctx, ls.st, ls.key, maxOwnerBytes)
	if err != nil {
		return "", false
	}
	o, err := parseOwner(b)
	if err != nil || o.Writer != ls.id {
		return "", false
	}
	return info.ETag, true
}

// renew extends the lease, conditionally on our last write of the owner
// object, and sets sent to when the renewal was sent: a renewal that lands
// proves that no other writer took the lease since our last write landed.
// It returns ErrLeaseLost when another writer holds it; any other error is
// transient.
func (ls *lease) renew(ctx context.Context) error {
	for try := 0; ; try++ {
		sent := time.Now()
		put, err := ls.st.Put(ctx, ls.key, ls.body(sent), staging.PutOptions{Conditions: staging.Conditions{IfMatch: ls.etag}})
		if err == nil {
			ls.etag, ls.sent = put.ETag, sent
			return nil
		}
		if !errors.Is(err, staging.ErrPrecondition) {
			return fmt.Errorf("renew wal lease %s: %w", ls.key, err)
		}
		// Our last renewal may have landed with its answer lost: the object then
		// still names us, under an ETag we did not see.
		b, info, gerr := staging.GetLimited(ctx, ls.st, ls.key, maxOwnerBytes)
		switch {
		case errors.Is(gerr, staging.ErrNotFound):
			return fmt.Errorf("wal lease %s was deleted: %w", ls.key, ErrLeaseLost)
		case gerr != nil:
			return fmt.Errorf("renew wal lease %s: read after a precondition failure: %w", ls.key, gerr)
		}
		o, perr := parseOwner(b)
		if perr != nil || o.Writer != ls.id {
			return fmt.Errorf("wal lease %s was taken by writer %q: %w", ls.key, o.Writer, ErrLeaseLost)
		}
		ls.etag = info.ETag
		// When that write was sent is not known: renewed again against it,
		// the lease is ours from a send time we know.
		if try > 0 {
			return fmt.Errorf("renew wal lease %s: the owner object keeps changing under our own writer id", ls.key)
		}
	}
}

// release deletes the owner object if it still names us. The store has no
// conditional delete: a writer that took the lease between the read and the
// delete loses it, which only happens to a lease that had expired.
func (ls *lease) release(ctx context.Context) error {
	b, _, err := staging.GetLimited(ctx, ls.st, ls.key, maxOwnerBytes)
	if errors.Is(err, staging.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release wal lease %s: %w", ls.key, err)
	}
	if o, err := parseOwner(b); err != nil || o.Writer != ls.id {
		return nil
	}
	if err := ls.st.Delete(ctx, ls.key); err != nil {
		return fmt.Errorf("release wal lease %s: %w", ls.key, err)
	}
	return nil
}
