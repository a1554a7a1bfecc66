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
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/staging"
)

// OwnerInfo is the content of the owner object: who holds the lease.
type OwnerInfo struct {
	Writer  string    // random id of the log
	Host    string    // os.Hostname
	PID     int       // os.Getpid
	Start   uint64    // when the process started, in clock ticks since boot (0 if unknown)
	Boot    string    // the kernel's boot id ("" if unknown)
	Expires time.Time // the lease is the writer's until then
}

// ownerJSON is OwnerInfo on the wire.
type ownerJSON struct {
	Writer  string `json:"writer"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Start   uint64 `json:"start,omitempty"`
	Boot    string `json:"boot"`
	Expires string `json:"expires"`
}

// maxOwnerBytes bounds what parseOwner reads: a real owner is ~200 bytes.
const maxOwnerBytes = 64 << 10

// encodeOwner is the body of the owner object.
func encodeOwner(o OwnerInfo) []byte {
	b, err := json.Marshal(ownerJSON{
		Writer:  o.Writer,
		Host:    o.Host,
		PID:     o.PID,
		Start:   o.Start,
		Boot:    o.Boot,
		Expires: o.Expires.UTC().Format(time.RFC3339Nano),
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
	return OwnerInfo{Writer: w.Writer, Host: w.Host, PID: w.PID, Start: w.Start, Boot: w.Boot, Expires: exp}, nil
}

// self is what identifies this process in a lease.
type self struct {
	host  string
	pid   int
	start uint64
	boot  string
}

func thisProcess() self {
	host, _ := os.Hostname() // "" never matches a stale owner's host check below
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	pid := os.Getpid()
	return self{host: host, pid: pid, start: processStart(pid), boot: strings.TrimSpace(string(boot))}
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
	// The command name, field 2, is in parentheses and may hold anything:
	// count fields after the last ')'. Field 3 is the first after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// processGone reports whether process pid has ended. ESRCH says so (EPERM
// is a process of another user, alive), and so does a zombie: a process
// that died and that its parent has not reaped yet still has its pid, but
// it runs no code and holds no file, so it renews no lease. Its state,
// field 3 of /proc/<pid>/stat, is 'Z' (or 'X' while it is being reaped).
func processGone(pid int) bool {
	if pid <= 0 || pid > math.MaxInt32 {
		return false
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	s := processState(pid)
	return s == 'Z' || s == 'X'
}

// processState returns the state letter of process pid (field 3 of
// /proc/<pid>/stat), or 0 if it cannot tell.
func processState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold anything:
	// the state follows the last ')' and a space.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// stale reports whether the lease o can be taken over by me at now.
func (me self) stale(o OwnerInfo, now time.Time) bool {
	return now.After(o.Expires) || me.gone(o)
}

// gone reports whether the writer of lease o is known to have ended: a
// process of this very boot of this host that no longer runs.
func (me self) gone(o OwnerInfo) bool {
	if me.boot == "" || me.host == "" || o.Boot != me.boot || o.Host != me.host {
		return false // another machine, or one we cannot tell apart: wait for expiry
	}
	// Same boot of this host: the pid, and when it started, tell. Our own
	// process is another log of it (every Open has a new writer id), which
	// is live. A pid that now names a process started at another time was
	// reused: the writer is gone.
	if o.PID == me.pid && (o.Start == 0 || me.start == 0 || o.Start == me.start) {
		return false
	}
	if processGone(o.PID) {
		return true
	}
	return o.Start != 0 && processStart(o.PID) != 0 && processStart(o.PID) != o.Start
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
}

func (ls *lease) body(now time.Time) []byte {
	return encodeOwner(OwnerInfo{Writer: ls.id, Host: ls.me.host, PID: ls.me.pid, Start: ls.me.start, Boot: ls.me.boot, Expires: now.Add(ls.ttl)})
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
		put, err := ls.st.Put(ctx, ls.key, ls.body(time.Now()), staging.PutOptions{Conditions: staging.Conditions{IfNoneMatch: true}})
		if err != nil {
			if etag, ok := ls.landed(ctx); ok {
				ls.etag = etag
				return nil
			}
		}
		if errors.Is(err, staging.ErrPrecondition) {
			return ls.busy(ctx, nil) // another writer created it since our Get
		}
		if err != nil {
			return fmt.Errorf("create wal lease %s: %w", ls.key, err)
		}
		ls.etag = put.ETag
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
			ls.etag = etag
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
	ls.etag = put.ETag
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

// renew extends the lease. It returns ErrLeaseLost when another writer holds
// it; any other error is transient.
func (ls *lease) renew(ctx context.Context) error {
	put, err := ls.st.Put(ctx, ls.key, ls.body(time.Now()), staging.PutOptions{Conditions: staging.Conditions{IfMatch: ls.etag}})
	if err == nil {
		ls.etag = put.ETag
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
	return nil
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
