// Package campaign is shared by the crash-and-fault campaign
// (test/campaign_test.go) and the driver program it runs through the mounts
// (test/campaign/driver): the bytes a write puts in a file, and the log the
// driver prints of every operation it attempts and how it ended.
//
// # The log
//
// One line per event on the driver's standard output, fields separated by
// one space:
//
//	B <seq> <unix ns> <kind> <mount> <args...>   an operation begins
//	E <seq> <unix ns> ok [<results...>]          it returned success
//	E <seq> <unix ns> err <errno> [read]         it returned an error ("read":
//	                                             from a read(2) after the open
//	                                             succeeded)
//
// <seq> numbers the driver's operations from 1 and is also the write's
// identity in Pattern; <mount> is 0 for the driver's home mount, 1 for the
// other one and 2 for the read-only one. Kinds and their arguments:
//
//	mkdir   0 <dir>
//	open    0 <name> <create 0|1> <trunc 0|1>     O_RDWR on the home mount
//	write   0 <name> <off> <len>                  pwrite of Pattern(id, seq, off, len)
//	trunc   0 <name> <size>                       ftruncate
//	fsync   0 <name>
//	close   0 <name>
//	read    0 <name>                              results: <len> <crc32c>
//	rename  m <src> <dst>
//	unlink  m <name>
//	see     m [dir]                               wait until mount m shows the directory as the other does
//	                                              (dir: until mount m has the directory)
//	cno     0 <name>                              results: <checkpoint number> (user.ckptfs.cno)
//	copy    m <src> <dst>                         copy_file_range whole into a new file through mount m,
//	                                              fsync, close, read back; results: <copied> <len> <crc32c>
//	pcopy   m <src> <dst> <off> <len> <dstoff>    the same for a part; results as copy
//	toolcp  0 <src> <dst>                         ckptfs cp (no mount), then both mounts show dst;
//	                                              results: <len> <crc32c> read back through the home mount
//	oread   1 <name> <hold 0|1>                   open, fstat, read through the other mount; results:
//	                                              <len> <crc32c> <st_size>; hold: the descriptor stays open
//	hread   1 <name>                              read through the held descriptor; results: <len> <crc32c>
//	hclose  1 <name>                              close the held descriptor
//	ocreat  1 <name>                              open(O_CREAT) without O_EXCL through the other mount right
//	                                              after the home mount created name; results: <ino> <home ino>
//	ostale  1 <name>                              open and read through the other mount right after the home
//	                                              mount unlinked name; results: noent | <len> <crc32c>
//	cread   2 <name>                              the same through the read-only mount that lags
//	chmod   m <name> <octal mode>
//	ckpt    m <name> <cno>                        read .checkpoints/<dir>/<name>/<cno> (cno -1: the newest
//	                                              listed); results: noent | <len> <crc32c>
//	                                              (cno -1: noent | <cno> <len> <crc32c>)
//	owrite  1 <name> <off> <len>                  open, pwrite of Pattern, close through the other mount
//	otrunc  1 <name> <size>                       open, ftruncate, close through the other mount
//
// The optional operations (Optional; the driver's -ops), each switched on
// by name:
//
//	append  1 <name> <m>:<len>...                 O_APPEND opens on both mounts, appends through mount m
//	                                              in the order given (the j-th writes Pattern(id,
//	                                              seq|(j+1)<<40, 0, len)), both closed; results: <len>
//	                                              <crc32c> of a new open through the home mount
//	rocreat 1 <name> <off> <len>                  right after the home mount created name, appends through
//	                                              it (together Pattern(id, seq, off, len)) while the other
//	                                              mount opens name O_RDONLY|O_CREAT four times; results:
//	                                              <ino>x4 <home ino> ok
//	cprw    m <src> <dst> <trunc> <len>:<len>...  copy whole through mount m while the other mount rewrites
//	                                              src until the copy is done, at most once per len
//	                                              (rewrite i: open, with O_TRUNC when trunc is 1,
//	                                              Pattern(id, seq|(i+1)<<40, 0, len i) at 0, close);
//	                                              results as copy, then the number of rewrites made
//	hreap   1 <name>                              after an oread that held a descriptor and the name's
//	                                              unlink, reads through it until the cleaner may have
//	                                              reaped the file; results: <reads> <len> <crc32c> | gone <errno>
//	mopen   3 <name>                              open through the plain mount beside WAL mounts
//	mwrite  3 <name> <off> <len>                  pwrite there, not flushed (the home then truncates, fsyncs)
//	mflush  3 <name>                              fsync and close there: a merge over the home's truncate
//	mread   3 <name>                              a new open there, read; results: <len> <crc32c>
//	olease  1 <name> <off> <len> <ooff> <olen>    with the WAL: the home writes Pattern(id, seq|1<<40, ...)
//	                                              while the campaign holds its requests longer than the
//	                                              lease, the other mount writes Pattern(id, seq|2<<40,
//	                                              ...) meanwhile; then the home closes; results: <home
//	                                              write> <other write> <home close> (ok or errno) <len>
//	                                              <crc32c> of a new open through the other mount
//
// The many-mounts mode (ModeMany: the driver's -many) logs namespace
// changes of paths relative to the mounts' root, through mount m of four
// (its absolute index); a driver owns its directory dN, what it makes
// inside, and the names "N.fK" of the shared directory ManyShared:
//
//	see     m                                     wait until mount m shows the driver's names as it left them
//	put     m <path> <excl> <trunc> <off> <len>   open O_WRONLY|O_CREAT (|O_EXCL, |O_TRUNC), pwrite of
//	                                              Pattern(id, seq, off, len), close; results: <ino>
//	read    m <path>                              results: <len> <crc32c>
//	rename  m <src> <dst>                         a file (within or across directories) or a directory
//	                                              within its parent
//	dmove   m <src> <dst>                         a directory into another; err 95 (ENOTSUP) is an answer
//	link    m <src> <dst>
//	unlink  m <path>
//	mkdir   m <path>
//	rmdir   m <path>
//	race    m <path> <len>                        O_EXCL create of ManyRaceName, pwrite of Pattern(id, seq,
//	                                              0, len), close; results: <ino>; err 17 (EEXIST) is an answer
//
// Names are file names inside the driver's directory. After its first error
// a driver stops: the operation that failed is the only one whose outcome is
// unknown.
package campaign

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The optional operations and modes, by the name that switches each on.
const (
	OpAppend        = "append"  // O_APPEND writers on both mounts
	OpROCreat       = "rocreat" // O_RDONLY|O_CREAT opens beside a creator's appends
	OpCopyRewritten = "cprw"    // a copy while the other mount rewrites the source
	OpReap          = "hreap"   // reads of a held descriptor while the cleaner reaps the file
	OpWALMix        = "walmix"  // a plain writer beside a WAL writer that truncates
	OpLease         = "olease"  // a lease taken from a slow WAL holder
	// ModeSlow is not an operation: a mode whose store is slow enough that
	// a retry outlives every window (test/campaign_test.go).
	ModeSlow = "slow"
	// ModeMany is not an operation either: four mounts of a namespace v2
	// volume changing names in directories of their own and a shared one.
	ModeMany = "many"
)

// ManyShared is the directory every driver of the many-mounts mode changes
// names in.
const ManyShared = "s"

// ManyRaceSlot: the drivers of the many-mounts mode that draw a race in
// one slot race for one name, created at the slot's end.
const ManyRaceSlot = 500 * time.Millisecond

// ManyRaceName is the shared directory's name that the races of slot (unix
// ns / ManyRaceSlot) of iteration iter are for.
func ManyRaceName(iter int, slot int64) string { return fmt.Sprintf("r%d-%d", iter, slot) }

// Optional lists the optional operations and modes.
var Optional = []string{OpAppend, OpROCreat, OpCopyRewritten, OpReap, OpWALMix, OpLease, ModeSlow, ModeMany}

// IsOptional reports whether name is one of Optional.
func IsOptional(name string) bool {
	for _, n := range Optional {
		if n == name {
			return true
		}
	}
	return false
}

// Xattr is the extended attribute the drivers set and remove (logged as
// "xattr NAME VALUE", VALUE "-" for a removal).
const Xattr = "user.campaign"

// Pattern returns the n bytes that write seq of driver id puts at offset off
// of a file. Every byte depends on (id, seq, off), so a byte read back names
// the write it came from and no other write's byte can pass for it.
func Pattern(id int, seq int64, off int64, n int) []byte {
	b := make([]byte, n)
	key := mix(uint64(id)<<48 ^ uint64(seq))
	var w uint64
	word := int64(-1)
	for i := range b {
		o := off + int64(i)
		if o>>3 != word {
			word = o >> 3
			w = mix(key ^ uint64(word))
		}
		b[i] = byte(w >> (8 * (o & 7)))
	}
	return b
}

// mix is SplitMix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Op is one operation of the log: its begin line and, when it ended, its
// end line.
type Op struct {
	Seq    int64
	Begin  int64 // unix ns
	Kind   string
	Mount  int
	Args   []string
	Ended  bool
	End    int64 // unix ns
	OK     bool
	Errno  int      // when !OK
	InRead bool     // when !OK: the error came from read(2), the open having succeeded
	Result []string // when OK
	// Data, in an operation the model makes up (never parsed), is the
	// content it leaves: a state found among several the log allows.
	Data []byte
}

func (o *Op) String() string {
	s := fmt.Sprintf("#%d %s@%d %s", o.Seq, o.Kind, o.Mount, strings.Join(o.Args, " "))
	switch {
	case !o.Ended:
		return s + " (no answer)"
	case o.OK:
		return s + " ok " + strings.Join(o.Result, " ")
	case o.InRead:
		return s + " err " + strconv.Itoa(o.Errno) + " read"
	default:
		return s + " err " + strconv.Itoa(o.Errno)
	}
}

// Int returns argument i as a number; the log is the driver's own, so a bad
// one is a bug of the driver and gives -1.
func (o *Op) Int(i int) int64 {
	if i >= len(o.Args) {
		return -1
	}
	n, err := strconv.ParseInt(o.Args[i], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Parse reads a driver's log into its operations, in order.
func Parse(lines []string) ([]*Op, error) {
	var ops []*Op
	bySeq := map[int64]*Op{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 {
			return nil, fmt.Errorf("log line %d %q: too short", i+1, l)
		}
		seq, err1 := strconv.ParseInt(f[1], 10, 64)
		ts, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("log line %d %q: bad seq or time", i+1, l)
		}
		switch f[0] {
		case "B":
			if len(f) < 5 {
				return nil, fmt.Errorf("log line %d %q: too short", i+1, l)
			}
			m, err := strconv.Atoi(f[4])
			if err != nil {
				return nil, fmt.Errorf("log line %d %q: bad mount", i+1, l)
			}
			o := &Op{Seq: seq, Begin: ts, Kind: f[3], Mount: m, Args: f[5:]}
			ops = append(ops, o)
			bySeq[seq] = o
		case "E":
			o := bySeq[seq]
			if o == nil || o.Ended {
				return nil, fmt.Errorf("log line %d %q: no operation %d in flight", i+1, l, seq)
			}
			o.Ended, o.End = true, ts
			switch f[3] {
			case "ok":
				o.OK, o.Result = true, f[4:]
			case "err":
				if len(f) == 6 && f[5] == "read" {
					o.InRead = true
				} else if len(f) != 5 {
					return nil, fmt.Errorf("log line %d %q: want one errno", i+1, l)
				}
				n, err := strconv.Atoi(f[4])
				if err != nil {
					return nil, fmt.Errorf("log line %d %q: bad errno", i+1, l)
				}
				o.Errno = n
			default:
				return nil, fmt.Errorf("log line %d %q: want ok or err", i+1, l)
			}
		default:
			return nil, fmt.Errorf("log line %d %q: want B or E", i+1, l)
		}
	}
	return ops, nil
}
