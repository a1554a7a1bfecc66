package test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWALOpenWhileHeldSeesChanges: with the WAL, mount B holds a descriptor
// of a file mount A is writing (under its name, or one A renamed it from);
// each change A makes (which the WAL acknowledges at once) must show in a new
// open on B, the held descriptor notwithstanding (B's engine refreshes), and
// so after each fsync, whose publish deletes the records it holds while B
// looks at them: B once took a record gone between its two looks at the log
// for nothing new, and showed the file without the write (1 run in 6 failed).
func TestWALOpenWhileHeldSeesChanges(t *testing.T) {
	for _, renamed := range []bool{false, true} {
		t.Run(map[bool]string{false: "same name", true: "renamed while held"}[renamed], func(t *testing.T) {
			testWALOpenWhileHeld(t, renamed)
		})
	}
}

func testWALOpenWhileHeld(t *testing.T, renamed bool) {
	v := newVolume(t)
	a := v.mount("wal=on,ns_refresh=100ms")
	b := v.mount("wal=on,ns_refresh=100ms")

	want := bytes.Repeat([]byte("0123456789abcdef"), 6000) // 96,000 bytes
	first := "f"
	if renamed {
		first = "g"
	}
	fa, err := os.Create(a.path(first))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := fa.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	name := first
	check := func(when string) {
		t.Helper()
		var got []byte
		waitFor(t, 10*time.Second, func() error { // the name shows within ns_refresh
			var err error
			got, err = os.ReadFile(b.path(name))
			return err
		})
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: B's new open read %d bytes, want %d (first difference at %d)", when, len(got), len(want), commonLen(got, want))
		}
	}
	check("after the first write")
	held, err := os.Open(b.path(name))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if renamed {
		if err := os.Rename(a.path("g"), a.path("f")); err != nil {
			t.Fatal(err)
		}
		name = "f"
		// A new file under the old name, as a writer that rotates.
		if err := os.WriteFile(a.path("g"), []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	type step struct {
		name string
		do   func() error
	}
	steps := []step{
		{"a write", func() error {
			copy(want[1000:], "written")
			_, err := fa.WriteAt([]byte("written"), 1000)
			return err
		}},
		{"a zeroed range, size kept", func() error {
			clear(want[69893 : 69893+3641])
			return unix.Fallocate(int(fa.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 69893, 3641)
		}},
		{"a punched hole", func() error {
			clear(want[20000:30000])
			return unix.Fallocate(int(fa.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 20000, 10000)
		}},
		{"a zeroed range past the end", func() error {
			want = append(want, make([]byte, 5000)...)
			clear(want[90000:])
			return unix.Fallocate(int(fa.Fd()), unix.FALLOC_FL_ZERO_RANGE, 90000, int64(len(want)-90000))
		}},
		{"a truncate", func() error {
			want = want[:50000]
			return fa.Truncate(50000)
		}},
	}
	// A fsync with the WAL returns once its publish has started; the
	// records it holds are deleted when it lands, while B may be looking.
	for i := range 40 {
		steps = append(steps, step{fmt.Sprintf("write %d", i), func() error {
			b := []byte(fmt.Sprintf("<%d>", i))
			copy(want[100*i:], b)
			_, err := fa.WriteAt(b, int64(100*i))
			return err
		}})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name)
		if err := fa.Sync(); err != nil {
			t.Fatal(err)
		}
		check(s.name + ", then fsync")
	}
}
