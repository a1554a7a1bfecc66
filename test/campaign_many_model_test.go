package test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/test/campaign"
)

// TestModelMany: the many-mounts mode's model accepts what four mounts of
// a v2 volume may leave after a kill and refuses what they may not, on
// logs made by hand (no mount).
func TestModelMany(t *testing.T) {
	const id = 1
	p := func(seq int64, off int64, n int) []byte { return campaign.Pattern(id, seq, off, n) }
	old := p(900, 0, 300)
	base := manyTree{
		"s": {dir: true, ino: 2}, "d1": {dir: true, ino: 3}, "d1/x0": {dir: true, ino: 4},
		"d1/f0": {ino: 10, data: old}, "s/1.f1": {ino: 11, data: []byte("one")},
		"d0": {dir: true, ino: 5}, "s/0.f0": {ino: 12, data: []byte("theirs")},
	}
	with := func(changes map[string]*manyEntry) manyTree {
		out := manyTree{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range changes {
			if v == nil {
				delete(out, k)
			} else {
				out[k] = *v
			}
		}
		return out
	}
	file := func(ino uint64, b []byte) *manyEntry { return &manyEntry{ino: ino, data: b} }
	dir := func(ino uint64) *manyEntry { return &manyEntry{dir: true, ino: ino} }
	put1 := p(1, 0, 100)
	for _, tc := range []struct {
		name     string
		lines    []string
		killedAt [manyMounts]int64
		got      manyTree
		want     string // a failure's words; "" for none
	}{
		{"acknowledged create, cross-directory rename, link and unlink are there",
			[]string{"B 1 10 put 2 d1/f2 1 0 0 100", "E 1 11 ok 77", "B 2 12 see 0", "E 2 13 ok",
				"B 3 14 rename 0 d1/f2 s/1.f3", "E 3 15 ok", "B 4 16 link 3 s/1.f3 d1/x0/f4", "E 4 17 ok",
				"B 5 18 unlink 1 d1/f0", "E 5 19 ok"},
			[manyMounts]int64{}, with(map[string]*manyEntry{"d1/f0": nil, "s/1.f3": file(77, put1), "d1/x0/f4": file(77, put1)}), ""},
		{"an acknowledged rename lost",
			[]string{"B 1 10 rename 0 d1/f0 s/1.f5", "E 1 11 ok"},
			[manyMounts]int64{}, base, "no state the model allows"},
		{"a rename in flight at the kill, not done",
			[]string{"B 1 10 rename 0 d1/f0 s/1.f5"}, [manyMounts]int64{9}, base, ""},
		{"a rename in flight at the kill, done",
			[]string{"B 1 10 rename 0 d1/f0 s/1.f5"}, [manyMounts]int64{9},
			with(map[string]*manyEntry{"d1/f0": nil, "s/1.f5": file(10, old)}), ""},
		{"a rename in flight at the kill, both names",
			[]string{"B 1 10 rename 0 d1/f0 s/1.f5"}, [manyMounts]int64{9},
			with(map[string]*manyEntry{"s/1.f5": file(10, old)}), "no state the model allows"},
		{"a directory's rename in flight: its names move with it or not at all",
			[]string{"B 1 10 put 0 d1/x0/f1 0 0 0 100", "E 1 11 ok 20", "B 2 12 rename 0 d1/x0 d1/x2"}, [manyMounts]int64{13},
			with(map[string]*manyEntry{"d1/x0": nil, "d1/x2": dir(4), "d1/x0/f1": file(20, put1)}), "no state the model allows"},
		{"a directory's rename, acknowledged",
			[]string{"B 1 10 put 0 d1/x0/f1 0 0 0 100", "E 1 11 ok 20", "B 2 12 rename 0 d1/x0 d1/x2", "E 2 13 ok"}, [manyMounts]int64{},
			with(map[string]*manyEntry{"d1/x0": nil, "d1/x2": dir(4), "d1/x2/f1": file(20, put1)}), ""},
		{"a directory moved into another answered ENOTSUP: v2 moves directories",
			[]string{"B 1 10 mkdir 0 d1/x1", "E 1 11 ok", "B 2 12 dmove 0 d1/x0 d1/x1/x0", "E 2 13 err 95"},
			[manyMounts]int64{}, with(map[string]*manyEntry{"d1/x1": dir(6)}), "while mount A was alive"},
		{"ENOTSUP from a rename of a file",
			[]string{"B 1 10 rename 0 d1/f0 d1/x0/f0", "E 1 11 err 95"},
			[manyMounts]int64{}, base, "while mount A was alive"},
		{"an error while the mount was alive",
			[]string{"B 1 10 unlink 2 d1/f0", "E 1 11 err 2"},
			[manyMounts]int64{}, base, "while mount C was alive"},
		{"an error after the mount was killed: outcome unknown",
			[]string{"B 1 10 unlink 2 d1/f0", "E 1 11 err 107"},
			[manyMounts]int64{0, 0, 10}, with(map[string]*manyEntry{"d1/f0": nil}), ""},
		{"a put in flight leaves a prefix of its write",
			[]string{"B 1 10 put 0 d1/f0 0 0 200 8192"}, [manyMounts]int64{11},
			with(map[string]*manyEntry{"d1/f0": file(10, manyWrite(old, 200, p(1, 200, 4096)))}), ""},
		{"a put in flight leaves bytes of no write",
			[]string{"B 1 10 put 0 d1/f0 0 0 200 8192"}, [manyMounts]int64{11},
			with(map[string]*manyEntry{"d1/f0": file(10, manyWrite(old, 200, p(2, 200, 4096)))}), "nor a prefix"},
		{"a name in a removed directory",
			[]string{"B 1 10 rmdir 0 d1/x0", "E 1 11 ok"},
			[manyMounts]int64{}, with(map[string]*manyEntry{"d1/x0/f9": file(30, nil)}), "no state the model allows"},
		{"a rename onto another name of one file does nothing",
			[]string{"B 1 10 link 0 d1/f0 d1/f1", "E 1 11 ok", "B 2 12 rename 1 d1/f1 d1/f0", "E 2 13 ok"},
			[manyMounts]int64{}, with(map[string]*manyEntry{"d1/f1": file(10, old)}), ""},
		{"two names of one file shown as two files",
			[]string{"B 1 10 link 0 d1/f0 d1/f1", "E 1 11 ok"},
			[manyMounts]int64{}, with(map[string]*manyEntry{"d1/f1": file(40, old)}), "not the file its other names are"},
		{"a read through another mount that misses the last acknowledged put",
			[]string{"B 1 10 put 0 d1/f0 0 1 0 100", "E 1 11 ok 10", "B 2 12 read 3 d1/f0", "E 2 13 ok 300 0"},
			[manyMounts]int64{}, with(map[string]*manyEntry{"d1/f0": file(10, put1)}), "want the file's current content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := campaign.Parse(tc.lines)
			if err != nil {
				t.Fatal(err)
			}
			fails := manyJudge(id, base, ops, tc.killedAt, nil, tc.got, nil)
			fails = append(fails, manyForeign(tc.got, 4)...)
			got := strings.Join(fails, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("refused: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("failures %q, want one saying %q", got, tc.want)
			}
		})
	}
}

// TestModelManyRaces: of the drivers racing for one name with O_EXCL, one
// wins and leaves its bytes; two winners, an EEXIST without a creator, or
// bytes no attempt wrote are failures.
func TestModelManyRaces(t *testing.T) {
	const name = "r0-5"
	win := func(id int, seq int64) manyTree {
		return manyTree{"s": {dir: true}, "s/" + name: {ino: 9, data: campaign.Pattern(id, seq, 0, 50)}}
	}
	none := manyTree{"s": {dir: true}}
	for _, tc := range []struct {
		name string
		logs [][]string
		got  manyTree
		want string
	}{
		{"one winner, one EEXIST", [][]string{{"B 3 10 race 0 s/r0-5 50", "E 3 11 ok 9"}, {"B 7 10 race 2 s/r0-5 50", "E 7 11 err 17"}}, win(0, 3), ""},
		{"two winners", [][]string{{"B 3 10 race 0 s/r0-5 50", "E 3 11 ok 9"}, {"B 7 10 race 2 s/r0-5 50", "E 7 11 ok 9"}}, win(0, 3), "2 O_EXCL creates succeeded"},
		{"the loser's bytes", [][]string{{"B 3 10 race 0 s/r0-5 50", "E 3 11 ok 9"}, {"B 7 10 race 2 s/r0-5 50", "E 7 11 err 17"}}, win(1, 7), "want the winner's"},
		{"the winner's name lost", [][]string{{"B 3 10 race 0 s/r0-5 50", "E 3 11 ok 9"}}, none, "want the winner's"},
		{"EEXIST and no creator", [][]string{{"B 3 10 race 0 s/r0-5 50", "E 3 11 err 17"}, {"B 7 10 race 2 s/r0-5 50", "E 7 11 err 17"}}, none, "no create of it succeeded"},
		{"EEXIST beside a create in flight, which landed", [][]string{{"B 3 10 race 0 s/r0-5 50"}, {"B 7 10 race 2 s/r0-5 50", "E 7 11 err 17"}}, win(0, 3), ""},
		{"a name of the shared directory no one made", nil, manyTree{"s": {dir: true}, "s/zz": {ino: 3}}, "no driver made"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := make([][]*campaign.Op, len(tc.logs))
			for i, l := range tc.logs {
				ops, err := campaign.Parse(l)
				if err != nil {
					t.Fatal(err)
				}
				logs[i] = ops
			}
			got := strings.Join(manyRaces(logs, tc.got, map[string][]byte{}, nil), "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("refused: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("failures %q, want one saying %q", got, tc.want)
			}
		})
	}
}

// TestModelManySealed: a name added to a directory whose rmdir was in
// flight at the last kill may be refused with ENOENT for TxGrace and a
// margin (manySealedENOENT, to go once v2 resolves a dead remover's seal);
// elsewhere, or later, ENOENT is a failure.
func TestModelManySealed(t *testing.T) {
	const id = 1
	base := manyTree{"s": {dir: true, ino: 2}, "d1": {dir: true, ino: 3}, "d1/x0": {dir: true, ino: 4}}
	kill := int64(1_000_000_000_000)
	doubt := map[string]int64{"d1/x0": kill}
	for _, tc := range []struct {
		name string
		line string
		want string
	}{
		{"a create in the sealed directory", fmt.Sprintf("B 1 %d put 0 d1/x0/f1 0 0 0 10", kill+int64(5*time.Second)), ""},
		{"a rename into it", fmt.Sprintf("B 1 %d rename 0 d1/f1 d1/x0/f1", kill+int64(5*time.Second)), ""},
		{"a create elsewhere", fmt.Sprintf("B 1 %d put 0 d1/f1 0 0 0 10", kill+int64(5*time.Second)), "while mount A was alive"},
		{"a create long after", fmt.Sprintf("B 1 %d put 0 d1/x0/f1 0 0 0 10", kill+int64(time.Minute)), "while mount A was alive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := campaign.Parse([]string{tc.line, "E 1 " + strconv.FormatInt(kill+int64(time.Hour), 10) + " err 2"})
			if err != nil {
				t.Fatal(err)
			}
			b := base
			if strings.Contains(tc.line, "d1/f1 d1/x0") {
				b = manyTree{"s": base["s"], "d1": base["d1"], "d1/x0": base["d1/x0"], "d1/f1": {ino: 9, data: []byte("x")}}
			}
			got := strings.Join(manyJudge(id, b, ops, [manyMounts]int64{}, doubt, b, nil), "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("refused: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("failures %q, want one saying %q", got, tc.want)
			}
		})
	}
}

// TestModelManyGCCounts: the many mode's summary counts what a gc run
// deleted from its output (cmd/ckptfs gc.go's lines), and nothing from a
// dry run's or a run that deleted nothing.
func TestModelManyGCCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want manyGCCounts
	}{
		{"nothing", "3 files, 5 checkpoints (3 retained): deleted 0 objects (0 bytes), kept 5 objects (10 bytes; 0 for copies by reference, 0 unreferenced for less than the minimum age), 0 orphaned files pending, 0 uploads aborted, 0 objects left alone, 2 live writers\n", manyGCCounts{}},
		{"objects, orphans and names", "deleted f/ab/c/1 (10 bytes): dropped by --keep\n" +
			"deleted orphaned file ab\ndeleted orphaned file cd\n" +
			"deleted ns2/tx/x (40 bytes): decision older than the trim grace\n" +
			"3 files, 5 checkpoints (3 retained): deleted 7 objects (70 bytes), kept 5 objects (10 bytes; 0 for copies by reference, 0 unreferenced for less than the minimum age), 0 orphaned files pending, 0 uploads aborted, 0 objects left alone, 2 live writers\n" +
			"names: deleted 4 objects, 1 op lists\n", manyGCCounts{objects: 7, orphans: 2, names: 4}},
		{"dry run", "would delete f/ab/c/1 (10 bytes): dropped by --keep\n" +
			"3 files, 5 checkpoints (3 retained): would delete 7 objects (70 bytes), kept 5 objects (10 bytes; 0 for copies by reference, 0 unreferenced for less than the minimum age), 0 orphaned files pending, 0 uploads aborted, 0 objects left alone, 2 live writers\n" +
			"names: would delete 4 objects, 1 op lists\n", manyGCCounts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g manyGCCounts
			g.add(tc.out)
			g.add("")
			if g != tc.want {
				t.Errorf("counts %+v, want %+v", g, tc.want)
			}
		})
	}
}
