package wal

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

const ownerKey = testPrefix + Dir + OwnerName

func readOwner(t *testing.T, st staging.Store) OwnerInfo {
	t.Helper()
	b, _, err := st.Get(context.Background(), ownerKey, staging.Whole())
	if err != nil {
		t.Fatalf("read owner: %v", err)
	}
	o, err := parseOwner(b)
	if err != nil {
		t.Fatalf("parse owner %q: %v", b, err)
	}
	return o
}

func putOwner(t *testing.T, st staging.Store, body []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), ownerKey, body, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	return cmd.Process.Pid
}

// zombiePID is the pid of a process that has exited and that nobody has
// reaped yet (its pid still exists, in state 'Z'); it is reaped when the test
// ends.
func zombiePID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start true: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	waitFor(t, "the child to exit", func() bool { return processState(pid) == 'Z' })
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the pid %d of a zombie: %v, want it to exist", pid, err)
	}
	return pid
}

func TestLeaseBusy(t *testing.T) {
	mem := mem.New()
	l1 := openLog(t, mem, Options{})
	_, err := Open(context.Background(), mem, testPrefix, Options{})
	var be *BusyError
	if !errors.Is(err, ErrBusy) || !errors.As(err, &be) {
		t.Fatalf("second open: %v, want ErrBusy", err)
	}
	host, _ := os.Hostname()
	if be.Key != ownerKey || be.Owner.Writer != l1.lease.id || be.Owner.PID != os.Getpid() || be.Owner.Host != host || !be.Owner.Expires.After(time.Now()) {
		t.Fatalf("busy error %+v", be)
	}
	msg := err.Error()
	for _, want := range []string{"wal of " + testPrefix + " is held by writer " + l1.lease.id, "pid ", "host " + host, "one writer at a time"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not say %q", msg, want)
		}
	}
	if err := l1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, mem, Options{})
	if o := readOwner(t, mem); o.Writer != l2.lease.id {
		t.Fatalf("owner %+v after the second open, want writer %s", o, l2.lease.id)
	}
}

// A writer that finds the lease held waits (Options.BusyWait) while the
// holder says it is closing, and takes the lease once it is let go; a
// holder that does not say so is tried for busyGrace only; without
// BusyWait the refusal is at once.
func TestLeaseBusyWait(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	l1 := openLog(t, mem, Options{})
	var be *BusyError
	if _, err := Open(ctx, mem, testPrefix, Options{BusyWait: 2 * busyGrace}); !errors.As(err, &be) || be.Owner.Closing {
		t.Fatalf("open while a writer holds the lease, not closing: %v, want ErrBusy", err)
	}
	l1.Closing()
	waitFor(t, "the owner to say it is closing", func() bool { return readOwner(t, mem).Closing })
	if _, err := Open(ctx, mem, testPrefix, Options{}); !errors.As(err, &be) || !be.Owner.Closing {
		t.Fatalf("open without BusyWait while the holder closes: %v, want ErrBusy naming a closing holder", err)
	}
	if _, err := l1.Append(ctx, []Op{writeOp(0, "closing")}); err != nil {
		t.Fatalf("append after Closing: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done <- l1.Close(ctx)
	}()
	l2, err := Open(ctx, mem, testPrefix, Options{BusyWait: time.Minute})
	if err != nil {
		t.Fatalf("open while the holder closes, with BusyWait: %v", err)
	}
	defer l2.Close(ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if o := readOwner(t, mem); o.Writer != l2.lease.id || o.Closing {
		t.Fatalf("owner %+v, want writer %s, not closing", o, l2.lease.id)
	}
	if _, err := Open(ctx, mem, testPrefix, Options{BusyWait: -time.Second}); err == nil || !strings.Contains(err.Error(), "busy wait") {
		t.Fatalf("a negative BusyWait: %v, want an error saying so", err)
	}
}

func TestLeaseTakeOver(t *testing.T) {
	me := thisProcess()
	future := time.Now().Add(time.Hour)
	// A start time of a process that ended is not known: any will do.
	owner := func(host string, pid int, boot string, expires time.Time) []byte {
		return encodeOwner(OwnerInfo{Writer: "previous", Host: host, PID: pid, PIDNS: me.pidns, Start: 1, Boot: boot, Expires: expires})
	}
	ownerStarted := func(pid int, start uint64) []byte {
		return encodeOwner(OwnerInfo{Writer: "previous", Host: me.host, PID: pid, PIDNS: me.pidns, Start: start, Boot: me.boot, Expires: future})
	}
	needBoot := me.boot != "" && me.host != "" && me.pidns != 0
	for _, tc := range []struct {
		name     string
		body     func(t *testing.T) []byte
		ttl      time.Duration
		age      time.Duration // sleep before Open
		needBoot bool          // the case tells pids apart on this boot
		taken    bool
	}{
		{name: "expired", body: func(*testing.T) []byte { return owner("elsewhere", 1, "b", time.Now().Add(-time.Second)) }, taken: true},
		{name: "live on another host", body: func(*testing.T) []byte { return owner("elsewhere", 1, "b", future) }},
		{name: "dead pid of this boot", body: func(t *testing.T) []byte { return owner(me.host, deadPID(t), me.boot, future) }, needBoot: true, taken: true},
		{name: "zombie of this boot", body: func(t *testing.T) []byte { return owner(me.host, zombiePID(t), me.boot, future) }, needBoot: true, taken: true},
		{name: "zombie of this boot, its start", body: func(t *testing.T) []byte {
			pid := zombiePID(t)
			return ownerStarted(pid, processStart(pid))
		}, needBoot: true, taken: true},
		{name: "dead pid, no start (an older writer)", body: func(t *testing.T) []byte {
			return encodeOwner(OwnerInfo{Writer: "previous", Host: me.host, PID: deadPID(t), PIDNS: me.pidns, Boot: me.boot, Expires: future})
		}, needBoot: true},
		{name: "dead pid, version 1", body: func(t *testing.T) []byte {
			return encodeOwner(OwnerInfo{Version: 1, Writer: "previous", Host: me.host, PID: deadPID(t), Start: 1, Boot: me.boot, Expires: future})
		}, needBoot: true},
		{name: "dead pid of another pid namespace", body: func(t *testing.T) []byte {
			return encodeOwner(OwnerInfo{Writer: "previous", Host: me.host, PID: deadPID(t), PIDNS: me.pidns + 1, Start: 1, Boot: me.boot, Expires: future})
		}, needBoot: true},
		{name: "dead pid of another boot", body: func(t *testing.T) []byte { return owner(me.host, deadPID(t), "another-boot", future) }},
		{name: "dead pid of another host", body: func(t *testing.T) []byte { return owner("elsewhere", deadPID(t), me.boot, future) }},
		{name: "live pid of this boot, no start", body: func(*testing.T) []byte { return ownerStarted(os.Getppid(), 0) }, needBoot: true},
		{name: "our pid, another log, no start", body: func(*testing.T) []byte { return ownerStarted(os.Getpid(), 0) }, needBoot: true},
		{name: "our pid and start, another log", body: func(*testing.T) []byte { return ownerStarted(os.Getpid(), me.start) }, needBoot: true},
		{name: "our pid reused: another start", body: func(*testing.T) []byte { return ownerStarted(os.Getpid(), me.start+1) }, needBoot: true, taken: true},
		{name: "live pid reused: another start", body: func(*testing.T) []byte {
			return ownerStarted(os.Getppid(), processStart(os.Getppid())+1)
		}, needBoot: true, taken: true},
		{name: "live pid, its start", body: func(*testing.T) []byte { return ownerStarted(os.Getppid(), processStart(os.Getppid())) }, needBoot: true},
		{name: "garbage, fresh", body: func(*testing.T) []byte { return []byte("not json") }},
		{name: "no writer, fresh", body: func(*testing.T) []byte { return []byte(`{"pid":1,"expires":"2000-01-01T00:00:00Z"}`) }},
		{name: "garbage, older than a TTL", body: func(*testing.T) []byte { return []byte("not json") }, ttl: 30 * time.Millisecond, age: 60 * time.Millisecond, taken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needBoot && !needBoot {
				t.Skip("the kernel boot id or the hostname cannot be read here")
			}
			mem := mem.New()
			putOwner(t, mem, tc.body(t))
			time.Sleep(tc.age)
			l, err := Open(context.Background(), mem, testPrefix, Options{LeaseTTL: tc.ttl})
			if !tc.taken {
				if !errors.Is(err, ErrBusy) {
					t.Fatalf("open: %v, want ErrBusy", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close(context.Background())
			if o := readOwner(t, mem); o.Writer != l.lease.id || o.PID != os.Getpid() || o.Boot != me.boot {
				t.Fatalf("owner after take-over %+v", o)
			}
		})
	}
}

func TestLeaseRaces(t *testing.T) {
	t.Run("create lost", func(t *testing.T) {
		// Another writer creates the owner between our Get and our create.
		mem := mem.New()
		f := faulty.New(mem, 1)
		f.Add(faulty.Rule{Op: staging.OpGet, KeyPrefix: ownerKey, Nth: 1, Kind: faulty.Error})
		st := &raceStore{Store: f, mem: mem, body: encodeOwner(OwnerInfo{Writer: "racer", Host: "h", PID: 1, Expires: time.Now().Add(time.Hour)})}
		_, err := Open(context.Background(), st, testPrefix, Options{})
		var be *BusyError
		if !errors.As(err, &be) || be.Owner.Writer != "racer" {
			t.Fatalf("open: %v, want busy with the racer", err)
		}
	})
	t.Run("take-over lost", func(t *testing.T) {
		mem := mem.New()
		putOwner(t, mem, encodeOwner(OwnerInfo{Writer: "old", Host: "h", PID: 1, Expires: time.Now().Add(-time.Hour)}))
		st := &raceStore{Store: mem, mem: mem, body: encodeOwner(OwnerInfo{Writer: "racer", Host: "h", PID: 1, Expires: time.Now().Add(time.Hour)})}
		_, err := Open(context.Background(), st, testPrefix, Options{})
		var be *BusyError
		if !errors.As(err, &be) || be.Owner.Writer != "racer" {
			t.Fatalf("open: %v, want busy with the racer", err)
		}
	})
}

// raceStore writes body as the owner just before the first conditional Put
// of the owner: another writer got there first.
type raceStore struct {
	staging.Store
	mem  *mem.Store
	body []byte
	done bool
}

func (r *raceStore) Get(ctx context.Context, key string, rg staging.Range) ([]byte, staging.ObjectInfo, error) {
	b, info, err := r.Store.Get(ctx, key, rg)
	if errors.Is(err, faulty.ErrInjected) {
		err = staging.ErrNotFound // the first Get sees no owner
	}
	return b, info, err
}

func (r *raceStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if key == ownerKey && !r.done {
		r.done = true
		if _, err := r.mem.Put(ctx, key, r.body, staging.PutOptions{}); err != nil {
			return staging.ObjectInfo{}, err
		}
	}
	return r.Store.Put(ctx, key, data, opts)
}

func TestLeaseRenewal(t *testing.T) {
	const ttl = 150 * time.Millisecond
	mem := mem.New()
	f := faulty.New(mem, 1)
	// One renewal lands with its answer lost; the next one must still find
	// the lease ours.
	f.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: ownerKey, Nth: 2, Kind: faulty.LostAnswer})
	// And one fails outright: retried at the next tick.
	f.Add(faulty.Rule{Op: staging.OpPut, KeyPrefix: ownerKey, Nth: 4, Kind: faulty.Error})
	l := openLog(t, f, Options{LeaseTTL: ttl})
	first := readOwner(t, mem).Expires
	time.Sleep(4 * ttl)
	if _, err := Open(context.Background(), mem, testPrefix, Options{LeaseTTL: ttl}); !errors.Is(err, ErrBusy) {
		t.Fatalf("open past the TTL of a renewed lease: %v, want ErrBusy", err)
	}
	if o := readOwner(t, mem); o.Writer != l.lease.id || !o.Expires.After(first.Add(ttl)) {
		t.Fatalf("owner %+v, first expiry %s: not renewed", o, first)
	}
	if f.Injected() != 2 {
		t.Fatalf("%d faults injected, want 2", f.Injected())
	}
	mustAppend(t, l, writeOp(0, "still ours"))
}

func TestLeaseLost(t *testing.T) {
	mem := mem.New()
	l := openLog(t, mem, Options{LeaseTTL: 60 * time.Millisecond})
	mustAppend(t, l, writeOp(0, "before"))
	other := OwnerInfo{Writer: "usurper", Host: "elsewhere", PID: 1, Expires: time.Now().Add(time.Hour)}
	putOwner(t, mem, encodeOwner(other))
	var err error
	waitFor(t, "the lease loss noticed", func() bool {
		_, err = l.Append(context.Background(), []Op{writeOp(0, "after")})
		return err != nil
	})
	if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "usurper") {
		t.Fatalf("append after the lease was taken: %v, want ErrLeaseLost naming the holder", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Close leaves another writer's lease alone.
	if o := readOwner(t, mem); !equalOwner(o, other) {
		t.Fatalf("owner after close %+v, want %+v", o, other)
	}
}

// A lease taken by another writer that let it go without appending is taken
// back, and appends go on (a reader replayed this log's records after a store
// outage stopped its renewals).
func TestLeaseTakenBack(t *testing.T) {
	const ttl = 60 * time.Millisecond
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, mem *mem.Store)
	}{
		{name: "deleted", change: func(t *testing.T, mem *mem.Store) {
			if err := mem.Delete(context.Background(), ownerKey); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "taken and released", change: func(t *testing.T, mem *mem.Store) {
			// The lease expires during an outage of this log's store; another
			// opener takes it, reads the records and lets it go.
			waitFor(t, "the lease to expire", func() bool { return time.Now().After(readOwner(t, mem).Expires) })
			l2, err := Open(context.Background(), mem, testPrefix, Options{LeaseTTL: ttl})
			if err != nil {
				t.Fatalf("take over the expired lease: %v", err)
			}
			if err := l2.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "taken, held a while, released", change: func(t *testing.T, mem *mem.Store) {
			putOwner(t, mem, encodeOwner(OwnerInfo{Writer: "reader", Host: "elsewhere", PID: 1, Expires: time.Now().Add(time.Hour)}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			f := faulty.New(mem, 1)
			var asked []uint64
			l := openLog(t, f, Options{LeaseTTL: ttl, Retake: func(_ context.Context, through uint64) (bool, error) {
				asked = append(asked, through)
				return true, nil
			}})
			mustAppend(t, l, writeOp(0, "before"))
			outage := f.Add(faulty.Rule{Op: staging.OpAny, KeyPrefix: ownerKey, Kind: faulty.Error})
			tc.change(t, mem)
			f.Remove(outage)
			if tc.name == "taken, held a while, released" {
				waitFor(t, "the lease loss noticed", func() bool {
					_, err := l.Append(context.Background(), []Op{writeOp(0, "meanwhile")})
					return errors.Is(err, ErrLeaseLost)
				})
				if err := mem.Delete(context.Background(), ownerKey); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the lease taken back", func() bool {
				b, _, err := mem.Get(context.Background(), ownerKey, staging.Whole())
				o, perr := parseOwner(b)
				return err == nil && perr == nil && o.Writer == l.lease.id
			})
			if seq := mustAppend(t, l, writeOp(6, "after")); seq < 2 {
				t.Fatalf("append after the lease was taken back: seq %d", seq)
			}
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, _, err := mem.Get(context.Background(), ownerKey, staging.Whole()); !errors.Is(err, staging.ErrNotFound) {
				t.Fatalf("the lease after close: %v, want it released", err)
			}
			if tc.name != "deleted" && len(asked) == 0 {
				t.Fatal("the file was not asked before the lease was taken back")
			}
		})
	}
}

// A lease whose taker appended, or after which the file changed otherwise,
// is lost for good.
func TestLeaseNotTakenBack(t *testing.T) {
	const ttl = 60 * time.Millisecond
	for _, tc := range []struct {
		name     string
		appended bool
		fileOK   bool
	}{
		{name: "another writer appended", appended: true, fileOK: true},
		{name: "the file changed", appended: false, fileOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			l := openLog(t, mem, Options{LeaseTTL: ttl, Retake: func(context.Context, uint64) (bool, error) { return tc.fileOK, nil }})
			mustAppend(t, l, writeOp(0, "before"))
			if err := mem.Delete(context.Background(), ownerKey); err != nil {
				t.Fatal(err)
			}
			if tc.appended {
				// Another writer: found the record, appended after it, let go.
				putRecord := Encode(testTag, Record{Seq: 2, Ops: []Op{writeOp(0, "theirs")}})
				if _, err := mem.Put(context.Background(), RecordKey(testPrefix, 2), putRecord, staging.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the lease lost for good", func() bool {
				l.mu.Lock()
				defer l.mu.Unlock()
				return l.lostFinal
			})
			if _, err := l.Append(context.Background(), []Op{writeOp(0, "after")}); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("append: %v, want ErrLeaseLost", err)
			}
			if _, _, err := mem.Get(context.Background(), ownerKey, staging.Whole()); !errors.Is(err, staging.ErrNotFound) {
				t.Fatalf("the lease: %v, want it left alone", err)
			}
		})
	}
}

func TestParseOwner(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		name string
		body string
		want OwnerInfo
		bad  string
	}{
		{name: "valid", body: `{"writer":"w","host":"h","pid":12,"boot":"b","expires":"2030-01-02T03:04:05.000000006Z"}`,
			want: OwnerInfo{Version: 1, Writer: "w", Host: "h", PID: 12, Boot: "b", Expires: exp}},
		{name: "offset and unknown field", body: `{"writer":"w","pid":12,"expires":"2030-01-02T04:04:05.000000006+01:00","new":[1]}`,
			want: OwnerInfo{Version: 1, Writer: "w", PID: 12, Expires: exp}},
		{name: "version 2", body: `{"v":2,"writer":"w","host":"h","pid":12,"pidns":4026531836,"start":99,"boot":"b","expires":"2030-01-02T03:04:05.000000006Z"}`,
			want: OwnerInfo{Version: 2, Writer: "w", Host: "h", PID: 12, PIDNS: 4026531836, Start: 99, Boot: "b", Expires: exp}},
		{name: "version 1 names no namespace", body: `{"writer":"w","pid":12,"pidns":7,"expires":"2030-01-02T03:04:05.000000006Z"}`,
			want: OwnerInfo{Version: 1, Writer: "w", PID: 12, Expires: exp}},
		{name: "a newer version", body: `{"v":3,"writer":"w","pid":12,"pidns":7,"expires":"2030-01-02T03:04:05.000000006Z"}`,
			want: OwnerInfo{Version: 3, Writer: "w", PID: 12, PIDNS: 7, Expires: exp}},
		{name: "closing", body: `{"v":2,"writer":"w","pid":12,"expires":"2030-01-02T03:04:05.000000006Z","closing":true}`,
			want: OwnerInfo{Version: 2, Writer: "w", PID: 12, Expires: exp, Closing: true}},
		{name: "negative version", body: `{"v":-1,"writer":"w","pid":1,"expires":"2030-01-02T03:04:05Z"}`, bad: "version -1"},
		{name: "not json", body: `owner`, bad: "parse owner"},
		{name: "trailing", body: `{"writer":"w","pid":1,"expires":"2030-01-02T03:04:05Z"} x`, bad: "parse owner"},
		{name: "no writer", body: `{"pid":1,"expires":"2030-01-02T03:04:05Z"}`, bad: "no writer"},
		{name: "pid 0", body: `{"writer":"w","pid":0,"expires":"2030-01-02T03:04:05Z"}`, bad: "pid 0"},
		{name: "negative pid", body: `{"writer":"w","pid":-1,"expires":"2030-01-02T03:04:05Z"}`, bad: "pid -1"},
		{name: "huge pid", body: `{"writer":"w","pid":4294967296,"expires":"2030-01-02T03:04:05Z"}`, bad: "pid 4294967296"},
		{name: "pid as string", body: `{"writer":"w","pid":"1","expires":"2030-01-02T03:04:05Z"}`, bad: "parse owner"},
		{name: "no expiry", body: `{"writer":"w","pid":1}`, bad: "expiry"},
		{name: "expiry not RFC 3339", body: `{"writer":"w","pid":1,"expires":"tomorrow"}`, bad: "expiry"},
		{name: "expiry before year 1 in UTC", body: `{"writer":"w","pid":1,"expires":"0001-01-01T00:00:00+01:00"}`, bad: "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOwner([]byte(tc.body))
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("parse: %+v, %v; want an error saying %q", o, err, tc.bad)
				}
				return
			}
			if err != nil || !equalOwner(o, tc.want) {
				t.Fatalf("parse: %+v, %v; want %+v", o, err, tc.want)
			}
		})
	}
}

// Held counts a lease as held unless its writer is known to be gone: an
// expired lease of a writer that may still run (another host, this process)
// is held, unlike for Open.
func TestHeld(t *testing.T) {
	me := thisProcess()
	if me.boot == "" || me.host == "" || me.pidns == 0 {
		t.Skip("the kernel boot id, the hostname or the pid namespace cannot be read here")
	}
	past := time.Now().Add(-time.Hour)
	owner := func(host string, pid int, expires time.Time) []byte {
		return encodeOwner(OwnerInfo{Writer: "w", Host: host, PID: pid, PIDNS: me.pidns, Start: 1, Boot: me.boot, Expires: expires})
	}
	ownerStarted := func(pid int, start uint64, expires time.Time) []byte {
		return encodeOwner(OwnerInfo{Writer: "w", Host: me.host, PID: pid, PIDNS: me.pidns, Start: start, Boot: me.boot, Expires: expires})
	}
	for _, tc := range []struct {
		name string
		body func(t *testing.T) []byte // nil: no owner object
		held bool
	}{
		{name: "no lease"},
		{name: "expired, another host", body: func(*testing.T) []byte { return owner("elsewhere", 1, past) }, held: true},
		{name: "expired, this process", body: func(*testing.T) []byte { return ownerStarted(os.Getpid(), me.start, past) }, held: true},
		{name: "expired, live pid", body: func(*testing.T) []byte { return ownerStarted(os.Getppid(), processStart(os.Getppid()), past) }, held: true},
		{name: "live pid", body: func(*testing.T) []byte {
			return ownerStarted(os.Getppid(), processStart(os.Getppid()), time.Now().Add(time.Hour))
		}, held: true},
		{name: "dead pid, version 1", body: func(t *testing.T) []byte {
			return encodeOwner(OwnerInfo{Version: 1, Writer: "w", Host: me.host, PID: deadPID(t), Start: 1, Boot: me.boot, Expires: time.Now().Add(time.Hour)})
		}, held: true},
		{name: "dead pid", body: func(t *testing.T) []byte { return owner(me.host, deadPID(t), time.Now().Add(time.Hour)) }},
		{name: "zombie", body: func(t *testing.T) []byte { return owner(me.host, zombiePID(t), time.Now().Add(time.Hour)) }},
		{name: "garbage", body: func(*testing.T) []byte { return []byte("not json") }, held: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			if tc.body != nil {
				putOwner(t, mem, tc.body(t))
			}
			held, err := Held(context.Background(), mem, testPrefix)
			if err != nil || held != tc.held {
				t.Fatalf("Held: %v, %v; want %v", held, err, tc.held)
			}
		})
	}
}

// resendOwnerStore sends every conditional write of the owner object twice,
// as an S3 client does when the first answer is lost: the resend is refused
// by the object the first one wrote.
type resendOwnerStore struct {
	staging.Store
}

func (r resendOwnerStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if key == ownerKey && (opts.Conditions.IfNoneMatch || opts.Conditions.IfMatch != "") {
		if _, err := r.Store.Put(ctx, key, data, opts); err != nil {
			return staging.ObjectInfo{}, err
		}
	}
	return r.Store.Put(ctx, key, data, opts)
}

// A lease whose create or take-over landed with its answer lost is ours: the
// writer is not busy against itself.
func TestLeaseAnswerLost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, st staging.Store)
	}{
		{"create", func(*testing.T, staging.Store) {}},
		{"take over", func(t *testing.T, st staging.Store) {
			putOwner(t, st, encodeOwner(OwnerInfo{Writer: "previous", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Minute)}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := mem.New()
			tc.setup(t, mem)
			l, err := Open(context.Background(), resendOwnerStore{mem}, testPrefix, Options{})
			if err != nil {
				t.Fatalf("open with a resent lease write: %v", err)
			}
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			if o := readOwner(t, mem); o.Writer != l.lease.id {
				t.Fatalf("owner %+v, want writer %s", o, l.lease.id)
			}
			mustAppend(t, l, writeOp(0, "ours"))
		})
	}
}

// The liveness rule: a writer is judged dead only when that is certain, on
// a fake process table.
func TestLeaseLiveness(t *testing.T) {
	me := self{host: "h", pid: 100, pidns: 4026531836, start: 5000, boot: "b"}
	// The process table: 200 runs, started at 7000; 300 is a zombie; 400
	// cannot be read (start unknown); every other pid is free.
	me.look = func(pid int) procInfo {
		switch pid {
		case 200:
			return procInfo{start: 7000}
		case 300:
			return procInfo{gone: true}
		case 400:
			return procInfo{}
		}
		return procInfo{gone: true}
	}
	lease := func(mod func(*OwnerInfo)) OwnerInfo {
		o := OwnerInfo{Version: OwnerVersion, Writer: "w", Host: "h", PID: 200, PIDNS: 4026531836, Start: 7000, Boot: "b"}
		mod(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		me   func(*self)
		o    OwnerInfo
		gone bool
	}{
		{"live: pid and start match", nil, lease(func(*OwnerInfo) {}), false},
		{"pid free", nil, lease(func(o *OwnerInfo) { o.PID = 201 }), true},
		{"zombie", nil, lease(func(o *OwnerInfo) { o.PID = 300 }), true},
		{"pid reused: another start", nil, lease(func(o *OwnerInfo) { o.Start = 6999 }), true},
		{"start of the pid unknown", nil, lease(func(o *OwnerInfo) { o.PID = 400 }), false},
		{"lease has no start", nil, lease(func(o *OwnerInfo) { o.PID, o.Start = 201, 0 }), false},
		{"another pid namespace, pid free", nil, lease(func(o *OwnerInfo) { o.PID, o.PIDNS = 201, 4026532000 }), false},
		{"another pid namespace, start differs", nil, lease(func(o *OwnerInfo) { o.PIDNS, o.Start = 4026532000, 1 }), false},
		{"lease names no pid namespace", nil, lease(func(o *OwnerInfo) { o.PID, o.PIDNS = 201, 0 }), false},
		{"our pid namespace unknown", func(m *self) { m.pidns = 0 }, lease(func(o *OwnerInfo) { o.PID, o.PIDNS = 201, 0 }), false},
		{"version 1, pid free", nil, lease(func(o *OwnerInfo) { o.Version, o.PID = 1, 201 }), false},
		{"a newer version, pid free", nil, lease(func(o *OwnerInfo) { o.Version, o.PID = OwnerVersion+1, 201 }), false},
		{"another host, pid free", nil, lease(func(o *OwnerInfo) { o.Host, o.PID = "h2", 201 }), false},
		{"another boot, pid free", nil, lease(func(o *OwnerInfo) { o.Boot, o.PID = "b2", 201 }), false},
		{"our boot id unknown", func(m *self) { m.boot = "" }, lease(func(o *OwnerInfo) { o.Boot, o.PID = "", 201 }), false},
		{"our host name unknown", func(m *self) { m.host = "" }, lease(func(o *OwnerInfo) { o.Host, o.PID = "", 201 }), false},
		{"our pid, our start: another log of ours", nil, lease(func(o *OwnerInfo) { o.PID, o.Start = 100, 5000 }), false},
		{"our pid, another start: reused", nil, lease(func(o *OwnerInfo) { o.PID, o.Start = 100, 4000 }), true},
		{"our pid, our start unknown", func(m *self) { m.start = 0 }, lease(func(o *OwnerInfo) { o.PID, o.Start = 100, 4000 }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := me
			if tc.me != nil {
				tc.me(&m)
			}
			if got := m.gone(tc.o); got != tc.gone {
				t.Fatalf("gone(%+v) by %+v = %v, want %v", tc.o, m, got, tc.gone)
			}
		})
	}
}
