package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/fs/inspect"
	"github.com/ckptfs/ckptfs/staging"
)

// The operator's commands, run as the built binary on a volume a real mount
// made: ls, info --json, cat (latest, --cno, a range), fsck, gc --dry-run,
// gc, and fsck of a corrupt object.
func TestToolsBinary(t *testing.T) {
	bin := ckptfsBinary(t)
	v := newVolume(t)
	m := v.mount("stream_segment_bytes=0")
	first := []byte(strings.Repeat("first version\n", 5000))
	second := []byte(strings.Repeat("second version!\n", 6000))
	if err := os.WriteFile(m.path("a.bin"), first, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("a.bin"), second, 0o644); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	store, opts, env := s3Args(t, v)
	tool := func(wantExit int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{args[0], "-o", opts}, args[1:]...)...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("ckptfs %v: %v", args, err)
		}
		if code != wantExit {
			t.Fatalf("ckptfs %v: exit %d, want %d\n%s%s", args, code, wantExit, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}

	if out := tool(0, "ls", store, "/"); !strings.Contains(out, "a.bin") {
		t.Fatalf("ls does not list a.bin:\n%s", out)
	}
	var info inspect.FileInfo
	if err := json.Unmarshal([]byte(tool(0, "info", "--json", store, "/a.bin")), &info); err != nil {
		t.Fatalf("info --json: %v", err)
	}
	if len(info.Checkpoints) < 2 || info.Size != int64(len(second)) {
		t.Fatalf("info: %d checkpoints, size %d; want at least 2 and %d", len(info.Checkpoints), info.Size, len(second))
	}
	oldest := info.Checkpoints[len(info.Checkpoints)-1].Cno
	if got := tool(0, "cat", store, "/a.bin"); got != string(second) {
		t.Fatalf("cat: %d bytes, want the second version", len(got))
	}
	if got := tool(0, "cat", "--cno", strconv.FormatUint(oldest, 10), store, "/a.bin"); got != string(first) {
		t.Fatalf("cat --cno %d: %d bytes, want the first version", oldest, len(got))
	}
	if got := tool(0, "cat", "--offset", "16", "--length", "16", store, "/a.bin"); got != string(second[16:32]) {
		t.Fatalf("cat of a range: %q", got)
	}
	tool(0, "fsck", store)

	st := v.store()
	before := countObjects(t, st, "")
	tool(0, "gc", "--dry-run", "--keep", "1", "--min-age", "0", store)
	if after := countObjects(t, st, ""); after != before {
		t.Fatalf("gc --dry-run: %d objects, %d before", after, before)
	}
	if out := tool(0, "gc", "--keep", "1", "--min-age", "0", store); !strings.Contains(out, "deleted") {
		t.Fatalf("gc deleted nothing:\n%s", out)
	}
	if after := countObjects(t, st, ""); after >= before {
		t.Fatalf("gc: %d objects, %d before", after, before)
	}
	tool(0, "fsck", store)
	if got := tool(0, "cat", store, "/a.bin"); got != string(second) {
		t.Fatalf("cat after gc: %d bytes, want the second version", len(got))
	}

	// Corrupt the latest checkpoint's part 0: fsck names it and fails.
	var key string
	if err := json.Unmarshal([]byte(tool(0, "info", "--json", store, "/a.bin")), &info); err != nil {
		t.Fatal(err)
	}
	key = info.Checkpoints[0].Objects[0].Key
	corrupt(t, st, key)
	if out := tool(1, "fsck", store); !strings.Contains(out, key) {
		t.Fatalf("fsck does not name %s:\n%s", key, out)
	}
}

// corrupt flips a byte in the middle of the object at key.
func corrupt(t *testing.T, st staging.Store, key string) {
	t.Helper()
	ctx := context.Background()
	b, info, err := st.Get(ctx, key, staging.Whole())
	if err != nil {
		t.Fatal(err)
	}
	b = append([]byte(nil), b...)
	b[len(b)/2] ^= 0xff
	if _, err := st.Put(ctx, key, b, staging.PutOptions{Conditions: staging.Conditions{IfMatch: info.ETag}}); err != nil {
		t.Fatal(err)
	}
}
