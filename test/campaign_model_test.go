package test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/test/campaign"
)

// TestCampaignModel: the campaign's check accepts what a crash may leave
// and refuses what it may not, on a log made by hand (no mount).
func TestCampaignModel(t *testing.T) {
	const id = 3
	lines := []string{
		"B 1 10 open 0 f0 1 0", "E 1 11 ok",
		"B 2 12 write 0 f0 0 100", "E 2 13 ok",
		"B 3 14 fsync 0 f0", "E 3 15 ok",
		"B 4 16 write 0 f0 50 100", "E 4 17 ok",
		"B 5 18 trunc 0 f0 120", "E 5 19 ok",
		"B 6 20 write 0 f0 0 10", "E 6 21 err 107", // in flight at the kill
	}
	ops, err := campaign.Parse(lines)
	if err != nil {
		t.Fatal(err)
	}
	state := func(upto int, partial int) []byte {
		var b []byte
		for _, op := range ops[:upto] {
			switch op.Kind {
			case "write":
				off, n := op.Int(1), op.Int(2)
				if op == ops[upto-1] && partial >= 0 {
					n = int64(partial)
				}
				if int64(len(b)) < off+n {
					b = append(b, make([]byte, off+n-int64(len(b)))...)
				}
				copy(b[off:], campaign.Pattern(id, op.Seq, off, int(n)))
			case "trunc":
				size := op.Int(1)
				nb := make([]byte, size)
				copy(nb, b)
				b = nb
			}
		}
		return b
	}
	model := func(wal bool) (*campaignRun, *mfile) {
		c := &campaignRun{wal: wal, curDriver: id}
		v := nsView{dir: true, names: map[string]*mfile{}}
		fail := func(f string, a ...any) { t.Fatalf(f, a...) }
		for i, op := range ops {
			if !c.apply(op, &v, i == len(ops)-1, fail) {
				t.Fatalf("apply %v", op)
			}
		}
		return c, v.names["f0"]
	}

	c, f := model(false)
	for _, tc := range []struct {
		name    string
		content []byte
		ok      bool
	}{
		{"the fsynced state", state(2, -1), true},
		{"a later state", state(4, -1), true},
		{"the last state", state(5, -1), true},
		{"the write in flight applied", state(6, -1), true},
		{"a prefix of a write after the fsync", state(4, 60), true},
		{"the state before the fsync", state(1, -1), false},
		{"the fsynced state cut short", state(2, -1)[:99], false},
		{"a byte no write put there", func() []byte { b := state(4, -1); b[70] ^= 1; return b }(), false},
		{"zeros in place of written bytes", make([]byte, 100), false},
	} {
		msg := c.matches(f, tc.content)
		if (msg == "") != tc.ok {
			t.Errorf("without the WAL, %s: accepted %v, want %v (%s)", tc.name, msg == "", tc.ok, msg)
		}
	}

	c, f = model(true)
	for _, tc := range []struct {
		name    string
		content []byte
		ok      bool
	}{
		{"the last acknowledged state", state(5, -1), true},
		{"the write in flight applied", state(6, -1), true},
		{"a prefix of the write in flight", state(6, 4), true},
		{"the fsynced state", state(2, -1), false},
		{"a prefix of an acknowledged write", state(4, 60), false},
	} {
		msg := c.matches(f, tc.content)
		if (msg == "") != tc.ok {
			t.Errorf("with the WAL, %s: accepted %v, want %v (%s)", tc.name, msg == "", tc.ok, msg)
		}
		if !tc.ok && !strings.Contains(msg, "history") {
			t.Errorf("with the WAL, %s: the failure does not give the history: %s", tc.name, msg)
		}
	}
}

// The model's fallocate: each mode's size and bytes, inside and past the end.
func TestModelFallocated(t *testing.T) {
	b := []byte("abcdefgh")
	punch := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
	zeroKeep := uint32(unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE)
	zero := uint32(unix.FALLOC_FL_ZERO_RANGE)
	for _, tc := range []struct {
		mode   uint32
		off, n int64
		want   string
	}{
		{punch, 2, 3, "ab\x00\x00\x00fgh"},
		{punch, 6, 10, "abcdef\x00\x00"},
		{punch, 9, 2, "abcdefgh"},
		{zeroKeep, 0, 1, "\x00bcdefgh"},
		{zero, 6, 4, "abcdef\x00\x00\x00\x00"},
		{zero, 10, 1, "abcdefgh\x00\x00\x00"},
		{0, 4, 2, "abcdefgh"},
		{0, 7, 3, "abcdefgh\x00\x00"},
	} {
		if got := fallocated(b, tc.mode, tc.off, tc.n); string(got) != tc.want {
			t.Errorf("fallocate mode %#x at %d+%d of %q: %q, want %q", tc.mode, tc.off, tc.n, b, got, tc.want)
		}
	}
	if string(b) != "abcdefgh" {
		t.Errorf("the state changed in place: %q", b)
	}
}

// applyLog parses a driver's log made by hand and applies it to an empty
// directory of c's model; with lastInFlight its last operation is the one
// in flight at the kill.
func applyLog(t *testing.T, c *campaignRun, lines []string, lastInFlight bool) nsView {
	t.Helper()
	ops, err := campaign.Parse(lines)
	if err != nil {
		t.Fatal(err)
	}
	v := nsView{dir: true, names: map[string]*mfile{}}
	for i, op := range ops {
		if !c.apply(op, &v, lastInFlight && i == len(ops)-1, func(f string, a ...any) { t.Fatalf(f, a...) }) {
			t.Fatalf("apply %v", op)
		}
	}
	return v
}

// The model's hard links: a second name leads to the same file, written
// through it; a rename between two names of one file does nothing; the file
// stays with its second name after its first is unlinked.
func TestModelLinks(t *testing.T) {
	const id = 4
	c := &campaignRun{curDriver: id}
	v := applyLog(t, c, []string{
		"B 1 10 open 0 f0 1 0", "E 1 11 ok",
		"B 2 12 write 0 f0 0 100", "E 2 13 ok",
		"B 3 14 close 0 f0", "E 3 15 ok",
		"B 4 16 link 1 f0 f1", "E 4 17 ok",
		"B 5 18 open 0 f1 0 0", "E 5 19 ok",
		"B 6 20 write 0 f1 100 50", "E 6 21 ok",
		"B 7 22 fsync 0 f0", "E 7 23 ok",
		"B 8 24 rename 0 f0 f1", "E 8 25 ok",
		"B 9 26 unlink 1 f0", "E 9 27 ok",
	}, false)
	if len(v.names) != 1 || v.names["f1"] == nil {
		t.Fatalf("names after the unlink: %v, want f1 alone", v.names)
	}
	want := make([]byte, 150)
	copy(want, campaign.Pattern(id, 2, 0, 100))
	copy(want[100:], campaign.Pattern(id, 6, 100, 50))
	if msg := c.matches(v.names["f1"], want); msg != "" {
		t.Errorf("both writes, through either name: %s", msg)
	}
	if msg := c.matches(v.names["f1"], want[:100]); msg == "" {
		t.Errorf("the write through the second name, fsynced through the first, lost: accepted")
	}
	if c.stats.links != 1 {
		t.Errorf("links counted: %d, want 1", c.stats.links)
	}
	// A link over an existing name is a failure of the log (the driver
	// links only to free names).
	bad, err := campaign.Parse([]string{"B 10 28 link 0 f1 f1", "E 10 29 ok"})
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	c.apply(bad[0], &v, false, func(string, ...any) { failed = true })
	if !failed {
		t.Errorf("a link over an existing name of the model: accepted")
	}
}

// The model's extended attribute: the last one set stays; a change in
// flight at the kill may or may not have happened; names of one file share
// it.
func TestModelXattr(t *testing.T) {
	c := &campaignRun{curDriver: 1}
	v := applyLog(t, c, []string{
		"B 1 10 open 0 f0 1 0", "E 1 11 ok",
		"B 2 12 xattr 1 f0 v2", "E 2 13 ok",
		"B 3 14 link 0 f0 f1", "E 3 15 ok",
		"B 4 16 xattr 0 f1 v4", "E 4 17 ok",
		"B 5 18 xattr 1 f0 -", // in flight at the kill
	}, true)
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"v4", true}, {"", true}, {"v2", false}, {"v5", false}} {
		if got := v.names["f0"].xattrOK(tc.value); got != tc.ok {
			t.Errorf("%s %q after the kill: accepted %v, want %v", campaign.Xattr, tc.value, got, tc.ok)
		}
	}
	if c.stats.xattrs != 2 {
		t.Errorf("changes counted: %d, want 2", c.stats.xattrs)
	}
}

// A chmod after the other mount's change reaches every history a merge may
// have given: a read that keeps one of them later does not take the mode
// back.
func TestModelChmodInEveryHistory(t *testing.T) {
	c := &campaignRun{curDriver: 2, createMode: 0o644}
	v := applyLog(t, c, []string{
		"B 1 10 open 0 f0 1 0", "E 1 11 ok",
		"B 2 12 write 0 f0 0 100", "E 2 13 ok",
		"B 3 14 fsync 0 f0", "E 3 15 ok",
		"B 4 16 write 0 f0 0 50", "E 4 17 ok",
		"B 5 18 write 0 f0 100 10", "E 5 19 ok",
		"B 6 20 owrite 1 f0 0 60", "E 6 21 ok",
		"B 7 22 chmod 1 f0 600", "E 7 23 ok",
	}, false)
	f := v.names["f0"]
	if len(f.choices) == 0 {
		t.Fatal("the other mount's change left one history: the test does not tell")
	}
	// The read shows a history other than the first: the home mount had
	// published its first write after the fsync before the other's change.
	b := f.choices[0].homeView()
	if bytes.Equal(b, f.homeView()) {
		t.Fatal("the histories read alike: the test does not tell")
	}
	read, err := campaign.Parse([]string{"B 8 24 read 0 f0", fmt.Sprintf("E 8 25 ok %d %d", len(b), crc(b))})
	if err != nil {
		t.Fatal(err)
	}
	if !c.apply(read[0], &v, false, func(f string, a ...any) { t.Fatalf(f, a...) }) {
		t.Fatal("apply the read")
	}
	if !f.modeOK(0o600) || f.modeOK(0o644) {
		t.Errorf("after the read kept another history the mode is %o, want 600", f.mode)
	}
}

// applyLogFails is applyLog that returns the failures instead of stopping.
func applyLogFails(t *testing.T, c *campaignRun, lines []string, lastInFlight bool) (nsView, []string) {
	t.Helper()
	ops, err := campaign.Parse(lines)
	if err != nil {
		t.Fatal(err)
	}
	v := nsView{dir: true, names: map[string]*mfile{}}
	var fails []string
	for i, op := range ops {
		c.apply(op, &v, lastInFlight && i == len(ops)-1, func(f string, a ...any) { fails = append(fails, fmt.Sprintf(f, a...)) })
	}
	return v, fails
}

// sumOf is the logged <len> <crc32c> of b.
func sumOf(b []byte) string { return fmt.Sprintf("%d %d", len(b), crc(b)) }

// The optional operations' checks accept what may be and refuse the faults
// they were made to find (docs/campaign.md, "Optional operations").
func TestModelOptional(t *testing.T) {
	const id = 5
	pat := func(seq int64, off, n int) []byte { return campaign.Pattern(id, seq, int64(off), n) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	base := pat(2, 0, 100)
	start := []string{
		"B 1 10 open 0 f0 1 0", "E 1 11 ok",
		"B 2 12 write 0 f0 0 100", "E 2 13 ok",
		"B 3 14 close 0 f0", "E 3 15 ok",
	}
	run := func(wal bool, lines ...string) (nsView, []string) {
		c := &campaignRun{curDriver: id, createMode: 0o644, wal: wal}
		return applyLogFails(t, c, append(slices.Clone(start), lines...), false)
	}

	// O_APPEND through both mounts: a serial order, never one append over
	// another's place.
	a1, b1, a2 := pat(4|1<<40, 0, 10), pat(4|2<<40, 0, 20), pat(4|3<<40, 0, 5)
	for _, tc := range []struct {
		name string
		got  []byte
		ok   bool
	}{
		{"home's, then the other's", cat(base, a1, a2, b1), true},
		{"interleaved", cat(base, a1, b1, a2), true},
		{"the other's first", cat(base, b1, a1, a2), true},
		{"one mount's out of its order", cat(base, a2, a1, b1), false},
		{"the home's merged at their offset over the other's", cat(base, a1, a2, b1[15:]), false},
		{"one vanished", cat(base, a1, a2), false},
	} {
		v, fails := run(false, "B 4 16 append 1 f0 0:10 1:20 0:5", "E 4 17 ok "+sumOf(tc.got))
		if (len(fails) == 0) != tc.ok {
			t.Errorf("append, %s: accepted %v, want %v (%q)", tc.name, len(fails) == 0, tc.ok, fails)
		}
		if tc.ok && !bytes.Equal(v.names["f0"].cur(), tc.got) {
			t.Errorf("append, %s: the model's state is not what was read", tc.name)
		}
	}

	// A copy while the other mount rewrites the source: one version.
	r1 := pat(4|1<<40, 0, 100)
	r2 := pat(4|2<<40, 0, 100)
	for _, tc := range []struct {
		name string
		got  []byte
		ok   bool
	}{
		{"the source before", base, true},
		{"the last rewrite", r2, true},
		{"a mix of two rewrites", cat(r1[:50], r2[50:]), false},
		{"a mix of the source and a rewrite", cat(base[:40], r1[40:]), false},
	} {
		_, fails := run(false, "B 4 16 cprw 1 f0 f1 0 100:100:60", "E 4 17 ok 100 "+sumOf(tc.got)+" 2")
		if (len(fails) == 0) != tc.ok {
			t.Errorf("cprw, %s: accepted %v, want %v (%q)", tc.name, len(fails) == 0, tc.ok, fails)
		}
	}
	// One that failed with ESTALE (the source showed another version than
	// the copy took): empty, or the start of one version.
	for _, tc := range []struct {
		name string
		got  []byte
		ok   bool
	}{
		{"empty", nil, true},
		{"the start of the source before", base[:30], true},
		{"the start of a rewrite", r1[:70], true},
		{"the source's start and a rewrite's", cat(base[:20], r1[20:70]), false},
	} {
		_, fails := run(false, "B 4 16 cprw 1 f0 f1 0 100:100:60", "E 4 17 ok stale "+sumOf(tc.got)+" 2")
		if (len(fails) == 0) != tc.ok {
			t.Errorf("cprw failed with ESTALE, %s: accepted %v, want %v (%q)", tc.name, len(fails) == 0, tc.ok, fails)
		}
	}

	// A write beside a slow lease holder: acknowledged writes stay.
	hw, ow := pat(4|1<<40, 10, 5), pat(4|2<<40, 50, 5)
	withHW := cat(base[:10], hw, base[15:])
	withOW := cat(base[:50], ow, base[55:])
	both := cat(withHW[:50], ow, withHW[55:])
	for _, tc := range []struct {
		name, res string
		got       []byte
		ok        bool
	}{
		{"both acknowledged, both there", "ok ok ok", both, true},
		{"the lease taken, the holder's write failed", "5 ok 5", withOW, true},
		{"the lease refused", "ok 16 ok", withHW, true},
		{"the holder's acknowledged write lost", "ok ok ok", withOW, false},
		{"the other's acknowledged write lost", "ok ok 5", withHW, false},
	} {
		_, fails := run(true, "B 4 16 olease 1 f0 10 5 50 5", "E 4 17 ok "+tc.res+" "+sumOf(tc.got))
		if (len(fails) == 0) != tc.ok {
			t.Errorf("olease, %s: accepted %v, want %v (%q)", tc.name, len(fails) == 0, tc.ok, fails)
		}
	}

	// One in flight at the kill: either write whole, or a first part of
	// it (the kernel hands the mount a write a page at a time), alone or
	// after the other whole; never a part from its middle on.
	hw2, ow2 := pat(4|1<<40, 10, 60), pat(4|2<<40, 30, 60)
	put := func(b []byte, off int, p []byte) []byte { b = bytes.Clone(b); copy(b[off:], p); return b }
	for _, tc := range []struct {
		name string
		got  []byte
		ok   bool
	}{
		{"neither", base, true},
		{"the home's whole", put(base, 10, hw2), true},
		{"the home's first part", put(base, 10, hw2[:25]), true},
		{"the other's whole, then the home's first part", put(put(base, 30, ow2), 10, hw2[:5]), true},
		{"the home's whole, then the other's first part", put(put(base, 10, hw2), 30, ow2[:40]), true},
		{"the home's last part alone", put(base, 40, hw2[30:]), false},
		{"a byte neither wrote", put(put(base, 10, hw2), 5, []byte{^base[5]}), false},
	} {
		c := &campaignRun{curDriver: id, createMode: 0o644, wal: true}
		ops, err := campaign.Parse(append(slices.Clone(start), "B 4 16 olease 1 f0 10 60 30 60", "E 4 17 err 103"))
		if err != nil {
			t.Fatal(err)
		}
		v := nsView{dir: true, names: map[string]*mfile{}}
		for i, op := range ops {
			if !c.apply(op, &v, i == len(ops)-1, func(f string, a ...any) { t.Fatalf(f, a...) }) {
				t.Fatalf("apply %v", op)
			}
		}
		if msg := c.matches(v.names["f0"], tc.got); (msg == "") != tc.ok {
			t.Errorf("olease in flight at the kill, %s: accepted %v, want %v (%s)", tc.name, msg == "", tc.ok, msg)
		}
	}

	// A plain writer beside a WAL writer that truncates: the truncate, then
	// the write.
	w := pat(6, 20, 30)
	truncThenWrite := cat(base[:20], w)
	writeOverUntruncated := cat(base[:20], w, base[50:])
	mix := []string{
		"B 4 16 open 0 f0 0 0", "E 4 17 ok",
		"B 5 18 mopen 3 f0", "E 5 19 ok",
		"B 6 20 mwrite 3 f0 20 30", "E 6 21 ok",
		"B 7 22 trunc 0 f0 30", "E 7 23 ok",
		"B 8 24 fsync 0 f0", "E 8 25 ok",
	}
	for _, tc := range []struct {
		name string
		got  []byte
		ok   bool
	}{
		{"the truncate, then the write", truncThenWrite, true},
		{"the acknowledged truncate lost", writeOverUntruncated, false},
	} {
		_, fails := run(true, append(slices.Clone(mix), "B 9 26 mflush 3 f0", "E 9 27 ok", "B 10 28 close 0 f0", "E 10 29 ok",
			"B 11 30 mread 3 f0", "E 11 31 ok "+sumOf(tc.got))...)
		if (len(fails) == 0) != tc.ok {
			t.Errorf("walmix, %s: accepted %v, want %v (%q)", tc.name, len(fails) == 0, tc.ok, fails)
		}
	}
	// Killed before the plain mount flushed: its write may be there or not,
	// the truncate is.
	c := &campaignRun{curDriver: id, createMode: 0o644, wal: true}
	v, fails := applyLogFails(t, c, append(slices.Clone(start), mix...), false)
	if len(fails) != 0 {
		t.Fatal(fails)
	}
	for _, tc := range []struct {
		name string
		got  []byte
		ok   bool
	}{
		{"the truncate", base[:30], true},
		{"the truncate and the pending write", truncThenWrite, true},
		{"the truncate lost", writeOverUntruncated, false},
	} {
		if msg := c.matches(v.names["f0"], tc.got); (msg == "") != tc.ok {
			t.Errorf("walmix killed before the plain mount's fsync, %s: accepted %v, want %v (%s)", tc.name, msg == "", tc.ok, msg)
		}
	}

	// A descriptor held across its file's unlink and reaping reads the
	// version its open showed, or ESTALE.
	held := []string{
		"B 4 16 oread 1 f0 1", "E 4 17 ok " + sumOf(base) + " 100",
		"B 5 18 unlink 0 f0", "E 5 19 ok",
	}
	for _, tc := range []struct {
		name, res string
		ok        bool
	}{
		{"the version it showed", "3 " + sumOf(base), true},
		{"gone", "gone 116", true},
		{"other bytes", "3 " + sumOf(base[:50]), false},
	} {
		_, fails := run(false, append(slices.Clone(held), "B 6 20 hreap 1 f0", "E 6 21 ok "+tc.res)...)
		if (len(fails) == 0) != tc.ok {
			t.Errorf("hreap, %s: accepted %v, want %v (%q)", tc.name, len(fails) == 0, tc.ok, fails)
		}
	}
}
