package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: what a program writes to tty, a
// terminal for isTerminal, the test reads from master.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		t.Skipf("no pseudo-terminal: unlock: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		t.Skipf("no pseudo-terminal: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close(); tty.Close() })
	return master, tty
}

// TestCatProgress: on a terminal, cat draws a bar with the file's total in
// human sizes; into a pipe or a file it draws nothing.
func TestCatProgress(t *testing.T) {
	store := "file://" + t.TempDir()
	if _, code, _, errOut := runStub([]string{"ckptfs", "format", store}, 0); code != 0 {
		t.Fatalf("format: %s", errOut)
	}
	const size = 9 << 20 // Cat writes 4 MiB at a time: the bar is drawn at 4 MiB of 9
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	local := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code, _, errOut := runStub([]string{"ckptfs", "cp", "--local", store, local, "/big.bin"}, 0); code != 0 {
		t.Fatalf("cp --local: %s", errOut)
	}
	ctx := context.Background()
	v, err := (&toolFlags{}).openVolume(ctx, store)
	if err != nil {
		t.Fatal(err)
	}

	master, tty := openPTY(t)
	drawn := make(chan string)
	go func() {
		b, _ := io.ReadAll(master) // ends with EIO once tty is closed
		drawn <- string(b)
	}()
	var out bytes.Buffer
	if err := catRun(ctx, v, "/big.bin", 0, 0, -1, &out, tty); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	got := <-drawn
	if !bytes.Equal(out.Bytes(), data) {
		t.Errorf("cat wrote %d bytes, want the file's %d", out.Len(), len(data))
	}
	for _, want := range []string{"cat /big.bin", "/9.0 MiB"} {
		if !strings.Contains(got, want) {
			t.Errorf("the bar lacks %q: %q", want, got)
		}
	}

	// The same into a file: no bar, and the total is not asked for.
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out.Reset()
	if err := catRun(ctx, v, "/big.bin", 0, 1<<20, 2<<20, &out, f); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 0 || !bytes.Equal(out.Bytes(), data[1<<20:3<<20]) {
		t.Errorf("into a file: %d bytes of bar, %d of data", st.Size(), out.Len())
	}
}

// TestCatTotal: the bar's total is the range cat writes.
func TestCatTotal(t *testing.T) {
	store := "file://" + t.TempDir()
	if _, code, _, errOut := runStub([]string{"ckptfs", "format", store}, 0); code != 0 {
		t.Fatalf("format: %s", errOut)
	}
	local := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(local, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code, _, errOut := runStub([]string{"ckptfs", "cp", "--local", store, local, "/f"}, 0); code != 0 {
		t.Fatalf("cp --local: %s", errOut)
	}
	ctx := context.Background()
	v, err := (&toolFlags{}).openVolume(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cno       uint64
		off, n    int64
		path      string
		wantTotal int64
	}{
		{0, 0, -1, "/f", 1000},
		{0, 100, -1, "/f", 900},
		{0, 100, 50, "/f", 50},
		{0, 990, 50, "/f", 10},
		{0, 2000, -1, "/f", 0},
		{1, 0, -1, "/f", 0}, // as of a checkpoint: unknown without --length
		{1, 0, 70, "/f", 70},
		{0, 0, -1, "/nope", 0},
	} {
		if got := catTotal(ctx, v, tc.path, tc.cno, tc.off, tc.n); got != tc.wantTotal {
			t.Errorf("catTotal(%s, cno %d, %d, %d) = %d, want %d", tc.path, tc.cno, tc.off, tc.n, got, tc.wantTotal)
		}
	}
}
