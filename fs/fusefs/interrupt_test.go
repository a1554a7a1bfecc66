package fusefs

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestGuardFatalOnly: an interrupt alone leaves the request's channel open;
// it closes once the caller is seen dying, which may be long after the
// interrupt (a SIGKILL after a SIGALRM brings no second INTERRUPT).
func TestGuardFatalOnly(t *testing.T) {
	var calls atomic.Int32
	var out <-chan struct{}
	ready := make(chan struct{})
	defer func(k func(uint32) bool) { killedFn = k }(killedFn)
	killedFn = func(pid uint32) bool {
		<-ready
		if pid != 42 {
			t.Errorf("killed(%d), want the caller 42", pid)
		}
		n := calls.Add(1)
		if n < 5 && closed(out) {
			t.Error("request canceled before its caller was dying")
		}
		return n >= 5
	}
	f := newFatalOnly(nil)
	in := make(chan struct{})
	var done func()
	out, done = f.guard(in, 42)
	close(ready)
	close(in)
	select {
	case <-out:
	case <-time.After(time.Minute):
		t.Fatal("the request of a dying caller was not canceled")
	}
	done()
	if n := calls.Load(); n != 5 {
		t.Errorf("killed called %d times, want 5", n)
	}
}

// TestGuardNotInterrupted: a request that was not interrupted is never
// canceled, and done waits for its watcher (none left behind).
func TestGuardNotInterrupted(t *testing.T) {
	defer func(k func(uint32) bool) { killedFn = k }(killedFn)
	killedFn = func(uint32) bool { t.Error("killed asked without an interrupt"); return true }
	f := newFatalOnly(nil)
	in := make(chan struct{})
	out, done := f.guard(in, uint32(os.Getpid()))
	time.Sleep(2 * guardDelay) // let the watcher start: done must wait for it
	done()
	if closed(out) {
		t.Error("a request not interrupted was canceled")
	}
	// Fast requests: the timer is stopped before it fires.
	_, done = f.guard(in, 1)
	done()
}

// TestGuardUnmount: the unmount ends an interrupted request whose caller
// lives, and one that was not interrupted.
func TestGuardUnmount(t *testing.T) {
	defer func(k func(uint32) bool) { killedFn = k }(killedFn)
	killedFn = func(uint32) bool { return false }
	f := newFatalOnly(nil)
	in := make(chan struct{})
	close(in)
	out1, done1 := f.guard(in, 7)
	out2, done2 := f.guard(make(chan struct{}), 7)
	defer done1()
	defer done2()
	f.once.Do(func() { close(f.unmounted) })
	for _, c := range []<-chan struct{}{out1, out2} {
		select {
		case <-c:
		case <-time.After(time.Minute):
			t.Fatal("a request still runs after the unmount")
		}
	}
}

// BenchmarkGuard is what the guard adds to a request answered at once (a
// read or write served from memory): a timer started and stopped, no
// goroutine.
func BenchmarkGuard(b *testing.B) {
	f := newFatalOnly(nil)
	in := make(chan struct{})
	b.ReportAllocs()
	for b.Loop() {
		_, done := f.guard(in, 1)
		done()
	}
}
