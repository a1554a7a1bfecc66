package test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMergeAfterTruncateOnOtherMount: mount A writes the head of a file
// without fsync; mount B truncates the file to 0 and publishes; A's fsync
// then merges onto B's checkpoint. The result must be a serial order of the
// two: B's truncate, then A's write (100,000 × 'A', nothing of the bytes B
// deleted), and both mounts read it.
func TestMergeAfterTruncateOnOtherMount(t *testing.T) {
	v := newVolume(t)
	a := v.mount("ns_refresh=100ms,flush_interval=0")
	b := v.mount("ns_refresh=100ms,flush_interval=0")
	const size, head = 200_000, 100_000
	if err := os.WriteFile(a.path("f"), bytes.Repeat([]byte{'X'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		st, err := os.Stat(b.path("f"))
		if err != nil {
			return err
		}
		if st.Size() != size {
			return fmt.Errorf("b sees %d bytes", st.Size())
		}
		return nil
	})

	fa, err := os.OpenFile(a.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := fa.WriteAt(bytes.Repeat([]byte{'A'}, head), 0); err != nil {
		t.Fatal(err)
	}
	// B empties the file; its close publishes the checkpoint.
	fb, err := os.OpenFile(b.path("f"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatalf("close on b: %v", err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatalf("fsync on a: %v", err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("close on a: %v", err)
	}

	want := bytes.Repeat([]byte{'A'}, head)
	check := func(m *mount, who string) {
		waitFor(t, 10*time.Second, func() error {
			got, err := os.ReadFile(m.path("f"))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%s reads %s, want %d × 'A'", who, describe(got), head)
			}
			return nil
		})
	}
	check(a, "a")
	check(b, "b")
}

// describe sums up bytes as runs: "100000 × 'A', 31072 × 'X', ...".
func describe(b []byte) string {
	var out []string
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && b[j] == b[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%d × %q", j-i, b[i]))
		if len(out) == 6 {
			out = append(out, "...")
			break
		}
		i = j
	}
	if len(out) == 0 {
		return "nothing"
	}
	return fmt.Sprint(out)
}
