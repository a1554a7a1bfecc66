package test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/inspect"
)

// TestFallocateModes drives fallocate(1) through every mode the mount
// answers: -n (--keep-size, KEEP_SIZE: reserves nothing, succeeds), -p (PUNCH_HOLE) and
// -z (ZERO_RANGE, with and without -n), and mode 0 past the end. After each
// the file reads zeros where it should and its data elsewhere; the whole
// blocks punched or zeroed leave the block map, so st_blocks (what the file
// stores, from its checkpoint's block count) drops by them once the
// fallocate's close publishes; both hold after a remount. With the WAL too:
// every change is logged before it returns.
func TestFallocateModes(t *testing.T) {
	need(t, "fallocate")
	for _, opts := range []string{"", "wal=on"} {
		t.Run("opts="+opts, func(t *testing.T) {
			v := newVolume(t)
			m := v.mount(opts)
			p := m.path("f")
			// The mount's data blocks are 64 KiB; 16 of them.
			const bs, n = 64 << 10, 1 << 20
			want := make([]byte, n)
			r := rand.NewChaCha8([32]byte{1})
			_, _ = r.Read(want)
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				args      []string
				off, size int64
				zero      bool // the range reads zeros after
				grow      bool // the size grows to its end
			}{
				// Nothing reserved, nothing changed: past the end and inside.
				{args: []string{"--keep-size"}, off: n, size: 1 << 20},
				{args: []string{"--keep-size"}, off: 1000, size: 5000},
				// Blocks 2..5 whole, the edges of 1 and 6 in place.
				{args: []string{"-p"}, off: 100_000, size: 300_000, zero: true},
				// Block 8 whole.
				{args: []string{"-z", "--keep-size"}, off: 500_000, size: 100_000, zero: true},
				// Inside block 9: the size stays.
				{args: []string{"-z"}, off: 600_000, size: 1000, zero: true},
				// Past the end, kept: the last 5000 bytes.
				{args: []string{"-z", "--keep-size"}, off: n - 5000, size: 100_000, zero: true},
				// Past the end: grows the file, the new part a hole.
				{args: []string{"-z"}, off: n - 1000, size: 200_000, zero: true, grow: true},
				// Mode 0 past the end grows it too.
				{args: nil, off: n + 199_000, size: 1000, grow: true},
			}
			check := func(when string) {
				t.Helper()
				got, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					i := 0
					for i < len(got) && i < len(want) && got[i] == want[i] {
						i++
					}
					t.Fatalf("%s: %d bytes, want %d; first difference at byte %d", when, len(got), len(want), i)
				}
			}
			for _, s := range steps {
				args := append(append([]string(nil), s.args...), "-o", strconv.FormatInt(s.off, 10), "-l", strconv.FormatInt(s.size, 10), p)
				run(t, "", "fallocate", args...)
				end := s.off + s.size
				if s.grow && end > int64(len(want)) {
					want = append(want, make([]byte, end-int64(len(want)))...)
				}
				if s.zero {
					clear(want[min(s.off, int64(len(want))):min(end, int64(len(want)))])
				}
				check("after fallocate " + args[0])
			}
			// Stored: blocks 0, 1, 6, 7, 9..15 (11 of 64 KiB); the file's
			// new end is holes. The fallocate's close published the last
			// change; the kernel's cached attributes expire within a second.
			const stored = 11 * bs / 512
			blocks := func() int64 {
				var st syscall.Stat_t
				if err := syscall.Stat(p, &st); err != nil {
					t.Fatal(err)
				}
				return st.Blocks
			}
			waitBlocks := func(when string) {
				t.Helper()
				deadline := time.Now().Add(15 * time.Second)
				for blocks() != stored {
					if time.Now().After(deadline) {
						t.Fatalf("%s: st_blocks %d, want %d (11 blocks of 64 KiB stored)", when, blocks(), stored)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			waitBlocks("after the punches")
			m.unmount()

			m2 := v.mount(opts)
			p = m2.path("f")
			check("after a remount")
			waitBlocks("after a remount")
			// ckptfs info says the same of the latest checkpoint.
			iv, err := inspect.Open(context.Background(), v.store(), "")
			if err != nil {
				t.Fatal(err)
			}
			fi, err := iv.FileInfo(context.Background(), "/f")
			if err != nil {
				t.Fatal(err)
			}
			if !fi.MappedKnown || fi.MappedBytes != 11*bs {
				t.Fatalf("info: mapped bytes %d (known %v), want %d", fi.MappedBytes, fi.MappedKnown, 11*bs)
			}
		})
	}
}
