package test

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// TestCopyIsOneVersion: a copy with copy_file_range, called as cp calls it
// (as much as it likes, again until an answer of 0), on mount a, while
// mount b rewrites the source between two calls (O_TRUNC, a longer
// version, fsync) and another process on a reads it then: the copy is the
// version its first call took, whole, and the next call answers 0. The
// second call was declined (EOPNOTSUPP), and the kernel appended the newer
// version's tail to the older one's bytes (a copy of 8 KiB of 1s and 32 KiB
// of 2s, a file neither mount ever wrote).
func TestCopyIsOneVersion(t *testing.T) {
	need(t, "python3")
	v1, v2 := bytes.Repeat([]byte("1"), 8<<10), bytes.Repeat([]byte("2"), 40<<10)
	a, b := twoMountsWith(t, "", "", v1)
	cmd := pythonPiped(t, a.dir, `
import os, sys
src, dst = sys.argv[1], sys.argv[2]
fi, fo = os.open(src, os.O_RDONLY), os.open(dst, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
answers = [os.copy_file_range(fi, fo, 1 << 30)]
print("copied", answers[0], flush=True)
sys.stdin.readline()
with open(src, "rb") as other:
    other.read()
while True:
    k = os.copy_file_range(fi, fo, 1 << 30)
    if k == 0:
        break
    answers.append(k)
os.close(fo)
data = open(dst, "rb").read()
print(",".join(map(str, answers)), len(data), data.count(b"1"), data.count(b"2"))
`, "f", "f.copy")
	cmd.waitLine("copied 8192")
	f, err := os.OpenFile(b.path("f"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(v2); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(cmd.in, "\n"); err != nil {
		t.Fatal(err)
	}
	if out, want := cmd.finish(), "8192 8192 8192 0"; out != want {
		t.Fatalf("copy while another mount rewrote the source (answers, size, 1s, 2s): %q, want %q", out, want)
	}
}
