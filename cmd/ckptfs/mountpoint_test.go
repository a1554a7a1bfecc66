package main

import (
	"errors"
	"strings"
	"testing"
)

const sampleMountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:31 / /mnt/my\040vol rw,nosuid,nodev,relatime shared:40 - fuse.ckptfs file:///s rw,user_id=1000,group_id=1000
37 22 0:32 / /mnt/back\134slash\011tab rw master:2 unbindable - tmpfs tmpfs rw
38 36 0:33 / /mnt/my\040vol/inner rw - fuse fuse rw
`

func TestParseMountinfo(t *testing.T) {
	got, err := parseMountinfo(strings.NewReader(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{"/", "ext4"},
		{"/mnt/my vol", "fuse.ckptfs"},
		{"/mnt/back\\slash\ttab", "tmpfs"},
		{"/mnt/my vol/inner", "fuse"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries %q, want %q", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %q, want %q", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"1 2 3 4 5 6 7\n", "1 2 3 4 /x rw -\n", "1 2 3\n", "1 2 3:4 / /x rw - \n", "1 2 3:4 / /x rw a b c d\n"} {
		if _, err := parseMountinfo(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMountinfo(%q) accepted", bad)
		}
	}
	if _, err := parseMountinfo(strings.NewReader(strings.Repeat("x", 64<<10+1))); err == nil {
		t.Error("a line past 64 KiB accepted")
	}
}

func TestMountedAt(t *testing.T) {
	mounts, err := parseMountinfo(strings.NewReader(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	_, err = mountedAt(mounts, "/mnt/my vol", "/mnt/my vol")
	if !errors.Is(err, errAlreadyMounted) {
		t.Fatalf("mountedAt(/mnt/my vol) = %v, want errAlreadyMounted", err)
	}
	if want := "/mnt/my vol is already a mount point (fuse.ckptfs); unmount it first: fusermount3 -u /mnt/my vol"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if _, err := mountedAt(mounts, "x", "/mnt/back\\slash\ttab"); err == nil || !strings.Contains(err.Error(), "umount x") || strings.Contains(err.Error(), "fusermount") {
		t.Errorf("tmpfs: %v, want umount named", err)
	}
	// A directory inside a mount, or a parent of one, is not a mount point.
	for _, p := range []string{"/mnt/my vol/sub", "/mnt", "/mnt/my"} {
		if _, err := mountedAt(mounts, p, p); err != nil {
			t.Errorf("mountedAt(%q) = %v, want nil", p, err)
		}
	}
}

// FuzzParseMountinfo: any input is parsed or refused, never a panic, and each
// entry has a file system type.
func FuzzParseMountinfo(f *testing.F) {
	f.Add(sampleMountinfo)
	f.Add("1 2 3 4 5 6 - \\\n")
	f.Add(`1 2 3 4 \0 6 - t s o`)
	f.Fuzz(func(t *testing.T, s string) {
		mounts, err := parseMountinfo(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range mounts {
			if m.fstype == "" {
				t.Fatalf("entry without a type: %q", m)
			}
		}
	})
}
