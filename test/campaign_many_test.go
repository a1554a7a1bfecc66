package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckptfs/ckptfs/fs/nsv2"
	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/test/campaign"
)

// The many-mounts mode (docs/campaign.md, "Many mounts"): four mounts of a
// namespace v2 volume, A, B (in a PID namespace of its own), C and D, all
// read-write, through the one fault proxy; four drivers (-many), each with
// a home mount, change names through any of the four, in a directory of
// their own and in the shared one (campaign.ManyShared), and race each
// other for names there with O_EXCL; the four mounts are killed at random
// moments, four new ones started, and every one must show what the model
// of the drivers' logs allows. The cleaner runs as in the other modes:
// `ckptfs gc` in a loop while the drivers work (manyTrimGrace: it trims
// the names' history within a run too), and at the end a last gc and an
// fsck that must be clean (manyFinalClean).

// manyTrimGrace is the gc loop's --trim-grace. It respects the rules of
// trimming (fs/nsv2/trim.go) with the mounts' options: it exceeds the
// longest a change of several names runs (the mounts' op_timeout, 30 s,
// config.DefaultOpTimeout) and nsv2.TxGrace (30 s: a lock whose decision
// was trimmed would read as undecided), and no mount of the mode pauses
// that long (the drivers keep all four busy, and a mount killed comes
// back fresh), so none holds in its cache what a trim deleted: the mounts
// drop their cache only after nsv2.TrimGrace. The other graces are the
// other modes' (campaignGrace, campaignNSLag, campaignMinAge): --ns-lag
// 1 s exceeds the mounts' ns_refresh (200 ms, campaignMountOpts) and the
// kernel's one-second caches, and an orphan record goes only after both
// it and --grace (10 s, and nsv2.TxGrace for a record whose name still
// binds its file). A run of three iterations lasts about a minute, so the
// history of the first iteration is trimmed in the last.
const manyTrimGrace = "40s"

// manyGCCounts: what the gc runs of the many mode deleted, from their
// output (cmd/ckptfs gc.go).
type manyGCCounts struct {
	objects, orphans, names int64
}

func (g *manyGCCounts) add(out string) {
	for _, l := range strings.Split(out, "\n") {
		var n, m int64
		switch {
		case strings.HasPrefix(l, "deleted orphaned file "):
			g.orphans++
		case strings.HasPrefix(l, "names: deleted "):
			if k, _ := fmt.Sscanf(l, "names: deleted %d objects, %d op lists", &n, &m); k == 2 {
				g.names += n
			}
		default:
			if _, rest, ok := strings.Cut(l, ": deleted "); ok && strings.Contains(l, " checkpoints (") {
				if k, _ := fmt.Sscanf(rest, "%d objects", &n); k == 1 {
					g.objects += n
				}
			}
		}
	}
}

// manyStats are the figures of the many-mounts mode.
type manyStats struct {
	iterations, kills  int
	ops, okOps         int64
	byKind             map[string]int64 // operations that succeeded, by kind
	unknown            int64            // in flight at a kill, or failed with EIO under faults: outcome unknown
	eio                int64
	sealedENOENT       int64 // names added to a directory a killed rmdir sealed, answered ENOENT (allowed, manySealedENOENT)
	races, raceWins    int64 // O_EXCL creates of race names, and those that won
	raceEEXIST         int64
	contested          int64 // race names two drivers or more tried
	names, dirsChecked int64 // names and directories checked on each of the four mounts after the kills
	bytesChecked       int64
	proxyFaults        int64
	proxyRequests      int64
	gcRuns, gcFailed   int64
	gc                 manyGCCounts // what the gc loop deleted
	fsckFiles          int64        // files fsck counted at the end
}

func (s manyStats) String() string {
	var kinds []string
	for _, k := range mapsKeys(s.byKind) {
		kinds = append(kinds, fmt.Sprintf("%d %s", s.byKind[k], k))
	}
	return fmt.Sprintf("%d iterations, %d SIGKILLs, %d operations (%d succeeded: %s), %d of unknown outcome, %d failed with EIO under faults, "+
		"%d names added to a directory a killed rmdir sealed answered ENOENT, %d O_EXCL races (%d won, %d EEXIST, %d names contested by two drivers or more), "+
		"%d files and %d directories checked (on each of the four mounts), %d bytes; %d gc runs (%d failed) deleted %d objects, %d orphaned files and %d objects of names' history; "+
		"%d files counted by fsck at the end; faults: %d of %d requests",
		s.iterations, s.kills, s.ops, s.okOps, strings.Join(kinds, ", "), s.unknown, s.eio, s.sealedENOENT,
		s.races, s.raceWins, s.raceEEXIST, s.contested, s.names, s.dirsChecked, s.bytesChecked,
		s.gcRuns, s.gcFailed, s.gc.objects, s.gc.orphans, s.gc.names, s.fsckFiles, s.proxyFaults, s.proxyRequests)
}

// mapsKeys: m's keys, sorted.
func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// manyMounts: A, B, C and D.
const manyMounts = 4

// manyEntry is a name as a mount shows it.
type manyEntry struct {
	dir  bool
	ino  uint64
	data []byte
}

// manyTree is everything a mount shows, by path from its root (the root
// itself left out).
type manyTree map[string]manyEntry

// manyState is what the model says a driver owns: its directories (its
// root dN among them), its files' names (a file of several names is one
// key) and each file's content.
type manyState struct {
	dirs  map[string]bool
	names map[string]int
	files map[int][]byte
	next  int
}

func (s *manyState) clone() *manyState {
	c := &manyState{dirs: map[string]bool{}, names: map[string]int{}, files: map[int][]byte{}, next: s.next}
	for k := range s.dirs {
		c.dirs[k] = true
	}
	for k, v := range s.names {
		c.names[k] = v
	}
	for k, v := range s.files {
		c.files[k] = v
	}
	return c
}

// manyOwner: the driver a path belongs to, or -1 (the shared directory,
// race names).
func manyOwner(p string) int {
	first, rest, _ := strings.Cut(p, "/")
	if first == campaign.ManyShared {
		if n, _, ok := strings.Cut(rest, "."); ok {
			if id, err := strconv.Atoi(n); err == nil {
				return id
			}
		}
		return -1
	}
	if id, err := strconv.Atoi(strings.TrimPrefix(first, "d")); err == nil && strings.HasPrefix(first, "d") {
		return id
	}
	return -1
}

// manyStateOf is driver id's part of a tree: names that share an inode
// number are one file.
func manyStateOf(tree manyTree, id int) *manyState {
	s := &manyState{dirs: map[string]bool{}, names: map[string]int{}, files: map[int][]byte{}}
	byIno := map[uint64]int{}
	for _, p := range mapsKeys(tree) {
		e := tree[p]
		if manyOwner(p) != id {
			continue
		}
		if e.dir {
			s.dirs[p] = true
			continue
		}
		k, ok := byIno[e.ino]
		if !ok {
			k = s.next
			s.next++
			byIno[e.ino] = k
			s.files[k] = e.data
		}
		s.names[p] = k
	}
	return s
}

// manyWrite returns b with w written at off (zeros between its end and
// off).
func manyWrite(b []byte, off int64, w []byte) []byte {
	n := max(int64(len(b)), off+int64(len(w)))
	out := make([]byte, n)
	copy(out, b)
	copy(out[off:], w)
	return out
}

// manyLoose: the content a put in flight at a kill may leave in its file:
// the old content, or the put's write, a prefix of it (the kernel hands a
// write to the mount a page at a time), on the old content (on nothing
// with O_TRUNC).
type manyLoose struct {
	path     string
	old, on  []byte
	off      int64
	write    []byte
	opString string
}

func (l *manyLoose) allows(got []byte) bool {
	if bytes.Equal(got, l.old) {
		return true
	}
	for k := len(l.write); k >= 0; k-- {
		if bytes.Equal(got, manyWrite(l.on, l.off, l.write[:k])) {
			return true
		}
	}
	return false
}

// apply makes the change of op, which succeeded, in s; a read that does
// not give the current content is a failure (returned).
func (s *manyState) apply(id int, op *campaign.Op) (*manyLoose, string) {
	a := op.Args
	switch op.Kind {
	case "see", "race":
	case "mkdir":
		s.dirs[a[0]] = true
	case "rmdir":
		delete(s.dirs, a[0])
	case "put":
		off, n := op.Int(3), int(op.Int(4))
		k, ok := s.names[a[0]]
		if !ok {
			k = s.next
			s.next++
			s.names[a[0]] = k
			s.files[k] = nil
		}
		old := s.files[k]
		on := old
		if a[2] == "1" {
			on = nil
		}
		w := campaign.Pattern(id, op.Seq, off, n)
		s.files[k] = manyWrite(on, off, w)
		return &manyLoose{path: a[0], old: old, on: on, off: off, write: w, opString: op.String()}, ""
	case "read":
		k, ok := s.names[a[0]]
		if !ok {
			return nil, fmt.Sprintf("%v: the model has no file %s", op, a[0])
		}
		b := s.files[k]
		want := []string{strconv.Itoa(len(b)), strconv.FormatUint(uint64(crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), 10)}
		if op.OK && !slices.Equal(op.Result, want) {
			return nil, fmt.Sprintf("%v: read %s, want the file's current content, %s %s", op, strings.Join(op.Result, " "), want[0], want[1])
		}
	case "unlink":
		delete(s.names, a[0])
	case "link":
		k, ok := s.names[a[0]]
		if !ok {
			return nil, fmt.Sprintf("%v: the model has no file %s", op, a[0])
		}
		s.names[a[1]] = k
	case "rename", "dmove":
		src, dst := a[0], a[1]
		if k, ok := s.names[src]; ok {
			if k2, there := s.names[dst]; there && k2 == k {
				return nil, "" // two names of one file: nothing (POSIX)
			}
			s.names[dst] = k
			delete(s.names, src)
			return nil, ""
		}
		if !s.dirs[src] {
			return nil, fmt.Sprintf("%v: the model has no %s", op, src)
		}
		delete(s.dirs, dst) // an empty directory replaced
		for _, p := range mapsKeys(s.dirs) {
			if p == src || strings.HasPrefix(p, src+"/") {
				delete(s.dirs, p)
				s.dirs[dst+strings.TrimPrefix(p, src)] = true
			}
		}
		for _, p := range mapsKeys(s.names) {
			if strings.HasPrefix(p, src+"/") {
				k := s.names[p]
				delete(s.names, p)
				s.names[dst+strings.TrimPrefix(p, src)] = k
			}
		}
	default:
		return nil, fmt.Sprintf("%v: not an operation of the many-mounts mode", op)
	}
	return nil, ""
}

// manyCandidate is a state the model allows after the kill: loose, when
// the put in flight may have left its file in part.
type manyCandidate struct {
	s     *manyState
	loose *manyLoose
	what  string
}

// manyErrUnknown: errors after which an operation may or may not have
// happened, as in the other modes: EIO from the proxy's faults past the
// SDK's retries, ETIMEDOUT from op_timeout, EINTR.
func manyErrUnknown(errno int) bool {
	return errno == int(syscall.EIO) || errno == int(syscall.ETIMEDOUT) || errno == int(syscall.EINTR)
}

// manySealedENOENT says whether op, which failed with ENOENT, added a name
// to a directory whose rmdir was in flight at an earlier kill (doubt: the
// directory and the kill's time), within TxGrace and a margin of it.
//
// TODO(nsv2): remove when a name added to a directory sealed by a remover
// that died waits for (or resolves) the seal's change rather than
// answering ENOENT. The dead remover's seal, with no decision, reads as
// sealed (fs/nsv2/lease.go, Tree.sealed) until a reader of the locked name
// of the directory decides abort after TxGrace (docs/namespace-v2.md
// section 3: "TxGrace only bounds how long a dead mount's lock holds up
// that name"); meanwhile a create there answers ENOENT although the
// directory was never removed. Found by this mode (docs/campaign.md).
func manySealedENOENT(op *campaign.Op, doubt map[string]int64) bool {
	if op.Errno != int(syscall.ENOENT) {
		return false
	}
	var target string
	switch op.Kind {
	case "put", "mkdir":
		target = op.Args[0]
	case "rename", "link", "dmove":
		target = op.Args[1]
	default:
		return false
	}
	k, ok := doubt[path.Dir(target)]
	return ok && op.Begin < k+int64(nsv2.TxGrace)+int64(15*time.Second)
}

// manyReplay follows driver id's log from base: the states the model
// allows after the kill (one, or two when the last operation's outcome is
// unknown) and the failures the log shows by itself. killedAt are the
// mounts' kill times (unix ns, 0: alive); doubt, the directories whose
// rmdir was in flight at an earlier kill (manySealedENOENT).
func manyReplay(id int, base *manyState, ops []*campaign.Op, killedAt [manyMounts]int64, doubt map[string]int64, st *manyStats) ([]manyCandidate, []string) {
	s := base.clone()
	var fails []string
	for i, op := range ops {
		if st != nil {
			st.ops++
		}
		switch {
		case op.Ended && op.OK:
			if st != nil {
				st.okOps++
				if st.byKind != nil {
					st.byKind[op.Kind]++
				}
			}
			if _, f := s.apply(id, op); f != "" {
				fails = append(fails, f)
			}
			continue
		case op.Ended && op.Kind == "race" && op.Errno == int(syscall.EEXIST):
			continue
		case op.Ended && manySealedENOENT(op, doubt):
			// The driver stops there; nothing happened.
			if st != nil {
				st.sealedENOENT++
			}
			if i != len(ops)-1 {
				fails = append(fails, fmt.Sprintf("%v: the driver went on after an operation that failed", op))
			}
			return []manyCandidate{{s: s, what: "the state before " + op.String()}}, fails
		}
		// The outcome is unknown: in flight at a kill, or failed under the
		// faults or because its mount died. A driver stops there.
		killed := op.Mount >= 0 && op.Mount < manyMounts && killedAt[op.Mount] != 0 && (!op.Ended || killedAt[op.Mount] <= op.End)
		if op.Ended && !killed && (!manyErrUnknown(op.Errno) || op.Kind == "see") {
			fails = append(fails, fmt.Sprintf("%v while mount %c was alive", op, 'A'+op.Mount))
		}
		if op.Ended && manyErrUnknown(op.Errno) && st != nil {
			st.eio++
		}
		if i != len(ops)-1 {
			fails = append(fails, fmt.Sprintf("%v: the driver went on after an operation that failed", op))
		}
		if st != nil {
			st.unknown++
		}
		if op.Kind == "see" || op.Kind == "read" || op.Kind == "race" {
			return []manyCandidate{{s: s, what: "the state before " + op.String()}}, fails
		}
		done := s.clone()
		ok := *op
		ok.Ended, ok.OK = true, true
		loose, f := done.apply(id, &ok)
		if f != "" {
			fails = append(fails, f)
			return []manyCandidate{{s: s, what: "the state before " + op.String()}}, fails
		}
		return []manyCandidate{{s: s, what: "the state without " + op.String()}, {s: done, loose: loose, what: "the state with " + op.String()}}, fails
	}
	return []manyCandidate{{s: s, what: "the state after the last operation"}}, fails
}

// manyMatch: whether driver id's part of got is candidate c's state, or
// why not.
func manyMatch(id int, got manyTree, c manyCandidate) string {
	g := manyStateOf(got, id)
	if !maps2Equal(g.dirs, c.s.dirs) {
		return fmt.Sprintf("directories %v, want %v", mapsKeys(g.dirs), mapsKeys(c.s.dirs))
	}
	if len(g.names) != len(c.s.names) {
		return fmt.Sprintf("files %v, want %v", mapsKeys(g.names), mapsKeys(c.s.names))
	}
	// One file for one file: names of one file in the model share one
	// inode number, names of two do not.
	gk2m := map[int]int{}
	mk2g := map[int]int{}
	for p, mk := range c.s.names {
		gk, ok := g.names[p]
		if !ok {
			return fmt.Sprintf("no file %s (files %v, want %v)", p, mapsKeys(g.names), mapsKeys(c.s.names))
		}
		if prev, seen := gk2m[gk]; seen && prev != mk {
			return fmt.Sprintf("%s is one file with a name of another file of the model", p)
		}
		if prev, seen := mk2g[mk]; seen && prev != gk {
			return fmt.Sprintf("%s is not the file its other names are (hard links)", p)
		}
		gk2m[gk], mk2g[mk] = mk, gk
		b := got[p].data
		if c.loose != nil && c.loose.path == p {
			if !c.loose.allows(b) {
				return fmt.Sprintf("%s holds %d bytes (crc %08x): neither what it held (%d bytes) nor a prefix of %s on it", p, len(b), crc32c(b), len(c.loose.old), c.loose.opString)
			}
			continue
		}
		if want := c.s.files[mk]; !bytes.Equal(b, want) {
			return fmt.Sprintf("%s holds %d bytes (crc %08x), want %d (crc %08x)%s", p, len(b), crc32c(b), len(want), crc32c(want), firstDiff(b, want))
		}
	}
	return ""
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf(", first difference at byte %d", i)
		}
	}
	return ""
}

func maps2Equal(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// manyJudge: driver id's failures, from its log (ops) on base and what
// the new mounts show after the kill (got).
func manyJudge(id int, base manyTree, ops []*campaign.Op, killedAt [manyMounts]int64, doubt map[string]int64, got manyTree, st *manyStats) []string {
	cands, fails := manyReplay(id, manyStateOf(base, id), ops, killedAt, doubt, st)
	var why []string
	for _, cand := range cands {
		w := manyMatch(id, got, cand)
		if w == "" {
			return fails
		}
		why = append(why, cand.what+": "+w)
	}
	return append(fails, "after the kill, mount A shows its names as no state the model allows: "+strings.Join(why, "; "))
}

// manyRaces checks the races of an iteration: per race name, at most one
// O_EXCL create succeeded; an EEXIST means someone created it (a winner,
// or an attempt whose outcome is unknown); after the kill the name is
// there with the winner's bytes, or, with no winner, absent or a prefix
// of an attempt in doubt's. Race names of earlier iterations (raceBase)
// stay as they were; nothing else of the shared directory but the
// drivers' own names is there.
func manyRaces(logs [][]*campaign.Op, got manyTree, raceBase map[string][]byte, st *manyStats) []string {
	type attempt struct {
		id int
		op *campaign.Op
	}
	byName := map[string][]attempt{}
	for id, ops := range logs {
		for _, op := range ops {
			if op.Kind == "race" {
				name := path.Base(op.Args[0])
				byName[name] = append(byName[name], attempt{id, op})
			}
		}
	}
	var fails []string
	for _, name := range mapsKeys(byName) {
		as := byName[name]
		var wins, doubt []attempt
		eexist := 0
		ids := map[int]bool{}
		for _, a := range as {
			ids[a.id] = true
			switch {
			case a.op.Ended && a.op.OK:
				wins = append(wins, a)
			case a.op.Ended && a.op.Errno == int(syscall.EEXIST):
				eexist++
			default:
				doubt = append(doubt, a)
			}
		}
		if st != nil {
			st.races += int64(len(as))
			st.raceWins += int64(len(wins))
			st.raceEEXIST += int64(eexist)
			if len(ids) > 1 {
				st.contested++
			}
		}
		describe := func() string {
			var s []string
			for _, a := range as {
				s = append(s, fmt.Sprintf("driver %d %v", a.id, a.op))
			}
			return strings.Join(s, "; ")
		}
		if _, old := raceBase[name]; old {
			fails = append(fails, fmt.Sprintf("race name %s was there before the iteration: %s", name, describe()))
			continue
		}
		if len(wins) > 1 {
			fails = append(fails, fmt.Sprintf("race name %s: %d O_EXCL creates succeeded: %s", name, len(wins), describe()))
			continue
		}
		if len(wins) == 0 && len(doubt) == 0 && eexist > 0 {
			fails = append(fails, fmt.Sprintf("race name %s: EEXIST, and no create of it succeeded: %s", name, describe()))
			continue
		}
		e, there := got[path.Join(campaign.ManyShared, name)]
		if e.dir {
			fails = append(fails, fmt.Sprintf("race name %s is a directory", name))
			continue
		}
		switch {
		case len(wins) == 1:
			w := wins[0]
			want := campaign.Pattern(w.id, w.op.Seq, 0, int(w.op.Int(1)))
			if !there || !bytes.Equal(e.data, want) {
				fails = append(fails, fmt.Sprintf("race name %s: after the kill there %v, %d bytes, want the winner's %d: %s", name, there, len(e.data), len(want), describe()))
			}
		case there:
			ok := false
			for _, a := range doubt {
				l := manyLoose{write: campaign.Pattern(a.id, a.op.Seq, 0, int(a.op.Int(1)))}
				if l.allows(e.data) {
					ok = true
				}
			}
			if !ok {
				fails = append(fails, fmt.Sprintf("race name %s: after the kill it holds %d bytes, a prefix of no create in doubt: %s", name, len(e.data), describe()))
			}
		}
	}
	for p, e := range got {
		dir, name := path.Split(p)
		if dir != campaign.ManyShared+"/" || manyOwner(p) >= 0 {
			continue
		}
		if b, old := raceBase[name]; old {
			if !bytes.Equal(b, e.data) {
				fails = append(fails, fmt.Sprintf("race name %s of an earlier iteration changed: %d bytes, were %d", name, len(e.data), len(b)))
			}
			continue
		}
		if _, raced := byName[name]; !raced {
			fails = append(fails, fmt.Sprintf("%s: a name of the shared directory no driver made", p))
		}
	}
	for name := range raceBase {
		if _, there := got[path.Join(campaign.ManyShared, name)]; !there {
			fails = append(fails, fmt.Sprintf("race name %s of an earlier iteration is gone", name))
		}
	}
	return fails
}

// manyForeign: names of got no driver and no race owns (a driver's
// directory is dN; the shared directory holds N.fK and race names).
func manyForeign(got manyTree, drivers int) []string {
	var fails []string
	for _, p := range mapsKeys(got) {
		if p == campaign.ManyShared {
			continue
		}
		first, _, _ := strings.Cut(p, "/")
		if first == campaign.ManyShared {
			continue // manyRaces and the drivers' states judge it
		}
		if id := manyOwner(p); id < 0 || id >= drivers {
			fails = append(fails, fmt.Sprintf("%s: a name no driver owns", p))
		}
	}
	return fails
}

// manyCompare: the names, kinds, inode numbers and bytes mount idx shows,
// against mount A's.
func manyCompare(idx int, a, b manyTree) string {
	var diffs []string
	for _, p := range mapsKeys(a) {
		x := a[p]
		y, ok := b[p]
		switch {
		case !ok:
			diffs = append(diffs, p+": missing")
		case x.dir != y.dir:
			diffs = append(diffs, p+": another kind")
		case x.ino != y.ino:
			diffs = append(diffs, fmt.Sprintf("%s: inode %d, A's %d", p, y.ino, x.ino))
		case !bytes.Equal(x.data, y.data):
			diffs = append(diffs, fmt.Sprintf("%s: %d bytes (crc %08x), A's %d (crc %08x)", p, len(y.data), crc32c(y.data), len(x.data), crc32c(x.data)))
		}
	}
	for _, p := range mapsKeys(b) {
		if _, ok := a[p]; !ok {
			diffs = append(diffs, p+": not on A")
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("and %d more", len(diffs)-10))
	}
	return fmt.Sprintf("mount %c disagrees with mount A: %s", 'A'+idx, strings.Join(diffs, "; "))
}

// runMany runs the many-mounts mode.
func (c *campaignRun) runMany(iterations int) manyStats {
	t := c.t
	st := manyStats{byKind: map[string]int64{}}
	c.manyDoubt = map[string]int64{}
	for i := range manyMounts {
		c.startMount(i, c.manyExtra(i, 0))
	}
	// The shared directory and the drivers' own, through A (under the
	// faults: an EIO may have made it).
	for _, d := range append([]string{campaign.ManyShared}, "d0", "d1", "d2", "d3") {
		var err error
		for range 10 {
			if err = os.Mkdir(filepath.Join(c.dirs[0], d), 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				err = nil
				break
			}
		}
		if err != nil {
			t.Fatalf("mkdir %s: %v", d, err)
		}
	}
	base, ok := c.manyRead(0)
	if !ok {
		return st
	}
	raceBase := map[string][]byte{}
	c.runGC()
	for iter := range iterations {
		base = c.manyIteration(iter, base, raceBase, &st)
	}
	gcStop := time.Now()
	c.stopGC()
	t.Logf("gc stopped in %v", time.Since(gcStop).Round(time.Millisecond))
	c.gcMu.Lock()
	for _, e := range c.gcErrs {
		t.Logf("a gc run failed: %s", e)
	}
	st.gcRuns, st.gcFailed, st.gc = int64(c.stats.gcRuns), int64(c.stats.gcFailed), c.manyGC
	c.gcMu.Unlock()
	st.fsckFiles = c.manyFinalClean(base)
	if c.proxy != nil {
		ctr := c.proxy.Counters()
		st.proxyFaults, st.proxyRequests = ctr.Faults(), ctr.Requests
	}
	return st
}

// manyExtra: two of the four mounts create files in the parted format,
// two in the stream format, swapping every iteration.
func (c *campaignRun) manyExtra(idx, iter int) string {
	if (idx+iter)%2 == 1 {
		return ",format=parted"
	}
	return ""
}

func (c *campaignRun) startManyDriver(id, home, iter int) *driverProc {
	d := &driverProc{id: id, home: home, done: make(chan struct{})}
	d.cmd = exec.Command(c.drv, "-many", "-id", strconv.Itoa(id), "-seed", strconv.FormatUint(c.seed*1000+uint64(iter), 10),
		"-dir", fmt.Sprintf("d%d", id), "-mounts", strings.Join(c.dirs[:], ","), "-home-index", strconv.Itoa(home),
		"-iter", strconv.Itoa(iter), "-seq-base", strconv.Itoa(iter*10_000_000))
	d.cmd.Env = c.env
	c.launch(d)
	return d
}

func (c *campaignRun) manyIteration(iter int, base manyTree, raceBase map[string][]byte, st *manyStats) manyTree {
	t := c.t
	start := time.Now()
	drivers := make([]*driverProc, campaignDrivers)
	for id := range drivers {
		drivers[id] = c.startManyDriver(id, (id+iter)%manyMounts, iter)
	}
	c.drivers = drivers
	runFor := time.Duration(1500+c.rngN(4500)) * time.Millisecond
	until := time.Now().Add(runFor)
	c.watch(drivers, func() bool { return time.Now().After(until) })
	c.beforeKill(drivers) // then the kills fall anywhere
	c.killedAt = [4]int64{}
	order := []int{0, 1, 2, 3}
	c.rngMu.Lock()
	c.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	c.rngMu.Unlock()
	var names []string
	for k, idx := range order {
		if k > 0 {
			gap := time.Now().Add(time.Duration(c.rngN(300)) * time.Millisecond)
			c.watch(drivers, func() bool { return time.Now().After(gap) })
		}
		c.killedAt[idx] = time.Now().UnixNano()
		c.kill(c.mounts[idx])
		names = append(names, string(rune('A'+idx)))
		st.kills++
	}
	for _, d := range drivers {
		_ = d.stdin.Close()
	}
	c.watch(drivers, func() bool {
		for _, d := range drivers {
			select {
			case <-d.done:
			default:
				return false
			}
		}
		return true
	})
	c.detach()
	stopped := time.Now()
	for i := range manyMounts {
		c.startMount(i, c.manyExtra(i, iter+1))
	}
	mounted := time.Now()
	got := c.manyCheck(iter, drivers, base, raceBase, st)
	st.iterations++
	t.Logf("many iteration %d: ran %v, killed %s, drivers stopped %v later, remounted in %v, checked in %v",
		iter, runFor.Round(time.Millisecond), strings.Join(names, ", "), stopped.Sub(start.Add(runFor)).Round(time.Millisecond),
		mounted.Sub(stopped).Round(time.Millisecond), time.Since(mounted).Round(time.Millisecond))
	return got
}

// manyCheck reads the tree through the four new mounts and checks it
// against the model; what A shows is the next iteration's base.
func (c *campaignRun) manyCheck(iter int, drivers []*driverProc, base manyTree, raceBase map[string][]byte, st *manyStats) manyTree {
	t := c.t
	logs := make([][]*campaign.Op, len(drivers))
	failed := false
	fail := func(format string, args ...any) {
		t.Errorf("iteration %d: "+format, append([]any{iter}, args...)...)
		failed = true
	}
	for i, d := range drivers {
		d.mu.Lock()
		lines := slices.Clone(d.lines)
		d.mu.Unlock()
		if d.stderr.Len() > 0 {
			fail("driver %d wrote to stderr: %s", d.id, d.stderr.String())
		}
		ops, err := campaign.Parse(lines)
		if err != nil {
			fail("driver %d: %v", d.id, err)
			continue
		}
		logs[i] = ops
	}
	trees := make([]manyTree, manyMounts)
	for i := range manyMounts {
		tr, ok := c.manyRead(i)
		if !ok {
			return base
		}
		trees[i] = tr
	}
	got := trees[0]
	disagree := false
	for i := 1; i < manyMounts; i++ {
		if s := manyCompare(i, got, trees[i]); s != "" {
			fail("%s", s)
			disagree = true
		}
	}
	if disagree {
		// Whether A's first reading was a moment's (it read before a
		// change of several names was resolved) or A keeps showing it.
		if again, ok := c.manyRead(0); ok {
			if s := manyCompare(0, got, again); s != "" {
				t.Logf("iteration %d: mount A read again: %s", iter, strings.ReplaceAll(s, "mount A disagrees with mount A", "A's second reading differs from its first"))
			} else {
				t.Logf("iteration %d: mount A read again shows what it showed first", iter)
			}
		}
	}
	for _, e := range got {
		if e.dir {
			st.dirsChecked++
		} else {
			st.names++
			st.bytesChecked += int64(len(e.data))
		}
	}
	for _, f := range manyForeign(got, len(drivers)) {
		fail("%s", f)
	}
	for i, d := range drivers {
		for _, f := range manyJudge(d.id, base, logs[i], c.killedAt, c.manyDoubt, got, st) {
			fail("driver %d: %s%s", d.id, f, c.manyFaults(logs[i]))
		}
		// An rmdir in flight at the kill leaves a seal (manySealedENOENT).
		if n := len(logs[i]); n > 0 {
			if op := logs[i][n-1]; op.Kind == "rmdir" && !op.OK && op.Mount < manyMounts && c.killedAt[op.Mount] != 0 {
				c.manyDoubt[op.Args[0]] = c.killedAt[op.Mount]
			}
		}
	}
	for _, f := range manyRaces(logs, got, raceBase, st) {
		fail("%s", f)
	}
	for p, e := range got {
		if dir, name := path.Split(p); dir == campaign.ManyShared+"/" && manyOwner(p) < 0 {
			raceBase[name] = e.data
		}
	}
	if failed {
		for i, d := range drivers {
			d.mu.Lock()
			_ = os.WriteFile(filepath.Join(c.logs, fmt.Sprintf("driver-%d-iter-%d.log", d.id, iter)), []byte(strings.Join(d.lines, "\n")+"\n"), 0o644)
			d.mu.Unlock()
			_ = logs[i]
		}
	}
	return got
}

// manyFaults: the faults injected while a driver's last operation ran.
func (c *campaignRun) manyFaults(ops []*campaign.Op) string {
	if len(ops) == 0 {
		return ""
	}
	s := c.faultsDuring(ops[len(ops)-1])
	if len(s) > 600 {
		s = s[:600] + " …"
	}
	return "; faults during its last operation: " + s
}

// manyRead reads everything mount idx shows, under the watchdog. An EIO
// (the faults, past the SDK's retries) is tried again.
func (c *campaignRun) manyRead(idx int) (manyTree, bool) {
	root := c.dirs[idx]
	type result struct {
		tr  manyTree
		err error
	}
	res := make(chan result, 1)
	var mu sync.Mutex
	doing := "walk " + root
	go func() {
		tr := manyTree{}
		err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == root {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			mu.Lock()
			doing = "read " + p
			mu.Unlock()
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil {
				return fmt.Errorf("lstat %s: %w", p, err)
			}
			e := manyEntry{dir: de.IsDir(), ino: st.Ino}
			if !e.dir {
				var b []byte
				for range 5 {
					if b, err = os.ReadFile(p); !errors.Is(err, syscall.EIO) {
						break
					}
				}
				if err != nil {
					return err
				}
				if int64(len(b)) != st.Size {
					return fmt.Errorf("%s: stat says %d bytes, read gave %d", p, st.Size, len(b))
				}
				e.data = b
			}
			tr[rel] = e
			return nil
		})
		res <- result{tr, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			c.t.Errorf("through mount %c after the kill: %v", 'A'+idx, r.err)
			return nil, false
		}
		return r.tr, true
	case <-time.After(campaignOpTimeout):
		mu.Lock()
		what := doing
		mu.Unlock()
		c.hang(fmt.Sprintf("the check's %s through mount %c did not return within %v", what, 'A'+idx, campaignOpTimeout))
		return nil, false
	}
}

// manyFinalClean: with the drivers gone and the four mounts idle, the last
// gc with no grace (twice: the second deletes what the first recorded),
// then fsck, which must find no problem and no leftover upload, and count
// the files the last check's tree names (a file of several names is one):
// an empty named file may have no object (a create the kill cut after its
// name landed and before its head did), which fsck does not count; a file
// with a writer marker of a killed mount may be an orphan still covered by
// it (finalClean of the other modes). It returns fsck's count.
func (c *campaignRun) manyFinalClean(tree manyTree) int64 {
	t := c.t
	named, empty := 0, 0
	inos := map[uint64]bool{}
	for _, e := range tree {
		if e.dir || inos[e.ino] {
			continue
		}
		inos[e.ino] = true
		named++
		if len(e.data) == 0 {
			empty++
		}
	}
	var gcOut string
	for range 2 {
		out, err := c.tool(2*c.opTimeout, "gc", "--keep", campaignKeep, "--grace", "0s", "--min-age", "0s", "--ns-lag", "0s", "--trim-grace", manyTrimGrace, "-o", c.opts, c.store)
		if err != nil {
			t.Errorf("the last gc: %v\n%s", err, out)
			return 0
		}
		c.gcMu.Lock()
		c.manyGC.add(out)
		c.gcMu.Unlock()
		gcOut = out
	}
	out, err := c.tool(2*c.opTimeout, "fsck", "-o", c.opts, c.store)
	if err != nil {
		t.Errorf("fsck after the last gc: %v\n%s\nthe last gc:\n%s", err, out, gcOut)
		return 0
	}
	var files, objects, problems, leftovers int
	for _, l := range strings.Split(out, "\n") {
		if n, _ := fmt.Sscanf(l, "%d files, %d objects, %d problems, %d leftovers", &files, &objects, &problems, &leftovers); n == 4 {
			break
		}
	}
	marked := map[string]bool{}
	objs, err := staging.ListAll(context.Background(), c.vol.store(), "f/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		id, rest, _ := strings.Cut(strings.TrimPrefix(o.Key, "f/"), "/")
		if strings.HasPrefix(rest, ckvolume.WritersDir) {
			marked[id] = true
		}
	}
	if problems != 0 || leftovers != 0 || files < named-empty || files > named+len(marked) {
		t.Errorf("fsck after the last gc: %d files (the mounts name %d, %d of them empty, %d files have writer markers), %d objects, %d problems, %d leftover uploads:\n%s\nthe last gc:\n%s",
			files, named, empty, len(marked), objects, problems, leftovers, out, gcOut)
	}
	t.Logf("fsck after the last gc: %d files (the mounts name %d, %d of them empty, %d files have writer markers), %d objects", files, named, empty, len(marked), objects)
	return int64(files)
}
