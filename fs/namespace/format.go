package namespace

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Keys under a mount root. Sequence numbers are decimal, zero-padded to 20
// digits (the width of the largest uint64) so that keys sort by seq.
//
//	<root>/ns/log/<seq>    one entry (one change, or several made at once);
//	                       created with If-None-Match: *
//	<root>/ns/snap/<seq>   the whole namespace as of log entry <seq>
//
// These names are part of the format. Entries below the newest snapshot's
// seq, and older snapshots, are deleted once older than TrimGrace (see
// Namespace.Compactable); entry <seq> of the newest snapshot stays.
const (
	nsDir      = "ns/"
	logDir     = "ns/log/"
	snapDir    = "ns/snap/"
	seqDigits  = 20
	writerMeta = "ckptfs-write" // metadata: the id of the change an entry holds
)

func prefix(root string) string {
	root = strings.Trim(root, "/")
	if root == "" {
		return ""
	}
	return root + "/"
}

// LogKey is the key of log entry seq under root.
func LogKey(root string, seq uint64) string {
	return prefix(root) + logDir + fmt.Sprintf("%0*d", seqDigits, seq)
}

// SnapKey is the key of the snapshot as of entry seq under root.
func SnapKey(root string, seq uint64) string {
	return prefix(root) + snapDir + fmt.Sprintf("%0*d", seqDigits, seq)
}

// parseSeq returns the seq of a log or snapshot key under dirPrefix.
func parseSeq(key, dirPrefix string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, dirPrefix)
	if !ok || len(s) != seqDigits {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Envelope of every namespace object (log entry or snapshot): a 16-byte
// header, little-endian, then a JSON body.
//
//	 0        4     5     6          8          12         16
//	+--------+-----+-----+----------+----------+----------+--------------+
//	| "CKNS" | ver | kind| reserved | body len | CRC-32C  | JSON body    |
//	| magic  | u8  | u8  | u16 = 0  | u32      | u32      | (body len B) |
//	+--------+-----+-----+----------+----------+----------+--------------+
//
// The CRC-32C (Castagnoli) covers header bytes 0..11 and the body, so a
// flipped kind or length is caught as well as a flipped body byte. The object
// is exactly 16 + body len bytes. JSON keeps the objects readable with
// ordinary S3 tools; the envelope makes them self-checking.
//
// Version 1 is every snapshot and every entry of one op; version 2 an entry
// of several ("ops", group commit); version 3 a snapshot that holds a FIFO
// or socket node (KindFIFO, KindSocket) and an entry, of one op or several,
// that holds a mknod op; version 4 a snapshot that holds a device node
// (KindCharDev, KindBlockDev, with its "ma" and "mi") and an entry that
// holds a mknod of one; version 5 the fence, an entry of no op that ends
// the log when the volume is upgraded to namespace v2 (ckptfs upgrade;
// fence.go). A build that predates a version refuses it as a
// version it does not know rather than misreads it, and only what needs a
// version is written in it: a volume without FIFOs, sockets or devices stays
// in 1 and 2, readable by builds before them, and one without devices in 1
// to 3. An object in a version below what it holds is corrupt, and so is
// one in a version above it.
//
//	version  snapshot                          log entry
//	1        no FIFO, socket or device node    "op", not mknod
//	2        (never)                           "ops", no mknod
//	3        a FIFO or socket node, no device  "op" or "ops", a mknod among them, none of a device
//	4        a device node                     "op" or "ops", a mknod of a device among them
//	5        (never)                           the fence: "fence", neither "op" nor "ops"
//
// These constants are part of the format.
const (
	envMagic        = "CKNS"
	envVersion      = 1
	envVersionOps   = 2
	envVersionNodes = 3
	envVersionDevs  = 4
	envVersionFence = 5
	envHeaderLen    = 16
	kindEntry       = 1
	kindSnapshot    = 2
	maxObjectBody   = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func seal(kind, version byte, body []byte) []byte {
	out := make([]byte, envHeaderLen+len(body))
	copy(out, envMagic)
	out[4] = version
	out[5] = kind
	binary.LittleEndian.PutUint32(out[8:], uint32(len(body)))
	copy(out[envHeaderLen:], body)
	crc := crc32.Update(crc32.Checksum(out[:12], castagnoli), castagnoli, body)
	binary.LittleEndian.PutUint32(out[12:], crc)
	return out
}

// unseal checks the envelope of data and returns its body and version.
func unseal(key string, kind byte, data []byte) ([]byte, byte, error) {
	if len(data) < envHeaderLen {
		return nil, 0, corruptf(key, "%d bytes, shorter than the %d-byte header", len(data), envHeaderLen)
	}
	if string(data[:4]) != envMagic {
		return nil, 0, corruptf(key, "bad magic %q", data[:4])
	}
	if data[4] != envVersion && data[4] != envVersionNodes && data[4] != envVersionDevs &&
		!(kind == kindEntry && (data[4] == envVersionOps || data[4] == envVersionFence)) {
		return nil, 0, corruptf(key, "unknown format version %d", data[4])
	}
	if data[5] != kind {
		return nil, 0, corruptf(key, "object kind %d, want %d", data[5], kind)
	}
	if binary.LittleEndian.Uint16(data[6:]) != 0 {
		return nil, 0, corruptf(key, "reserved header bytes are not zero")
	}
	n := binary.LittleEndian.Uint32(data[8:])
	if n > maxObjectBody || int64(n) != int64(len(data)-envHeaderLen) {
		return nil, 0, corruptf(key, "body length %d, object holds %d", n, len(data)-envHeaderLen)
	}
	body := data[envHeaderLen:]
	crc := crc32.Update(crc32.Checksum(data[:12], castagnoli), castagnoli, body)
	if got := binary.LittleEndian.Uint32(data[12:]); got != crc {
		return nil, 0, corruptf(key, "checksum %08x, computed %08x", got, crc)
	}
	return body, data[4], nil
}

// decodeJSON decodes body strictly: unknown fields and trailing data are
// corruption, not something to skip.
func decodeJSON(key string, body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return corruptf(key, "decode body: %v", err)
	}
	if dec.More() {
		return corruptf(key, "data after the body")
	}
	return nil
}

// bname is a name, symlink target or attribute name: POSIX allows any bytes,
// JSON strings only UTF-8. Valid UTF-8 is a JSON string; anything else is
// {"b":"<base64>"}, so that every byte survives.
type bname string

func (b bname) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(b)) {
		return json.Marshal(string(b))
	}
	return json.Marshal(struct {
		B []byte `json:"b"`
	}{[]byte(b)})
}

func (b *bname) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = bname(s)
		return nil
	}
	var raw struct {
		B *string `json:"b"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw.B == nil {
		return fmt.Errorf("name is neither a string nor {\"b\":...}")
	}
	v, err := base64.StdEncoding.DecodeString(*raw.B)
	if err != nil {
		return fmt.Errorf("name: %w", err)
	}
	*b = bname(v)
	return nil
}

// Operation kinds of a log entry. These strings are part of the format.
const (
	opCreate      = "create"
	opMkdir       = "mkdir"
	opSymlink     = "symlink"
	opLink        = "link"
	opUnlink      = "unlink"
	opRmdir       = "rmdir"
	opRename      = "rename"
	opSetAttr     = "setattr"
	opSetXattr    = "setxattr"
	opRemoveXattr = "removexattr"
	opForget      = "forget"
	opMknod       = "mknod" // envelope version 3 or 4 only
)

// entry is the body of one log entry: one op, or several (changes made at
// once on one mount share an entry: group commit), applied atomically and in
// order, each against the state the ones before it left.
//
//	{"seq":7,"id":"<32 hex>","t":<unix ns>,"op":{"k":"create","p":1,"n":"a",...}}
//	{"seq":8,"id":"<32 hex>","t":<unix ns>,"ops":[{"k":"create",...},{"k":"unlink",...}]}
//
// Exactly one of "op" (an entry of one op) and "ops" (2 to maxEntryOps ops)
// is present; a decoder refuses both, neither, and an "ops" of fewer than two.
// The node the i-th op creates, and the cookie of a name it gives, is
// seq<<16 | i (seq<<16 for an entry of one op).
//
// seq repeats the key's number so that an object copied to another key is
// refused; id is random per entry (also in the object's ckptfs-write
// metadata) so that a writer recognises its own entry after a lost answer; t
// is the time of the change, used for every time its ops set, so that every
// mount replays the same state.
//
// The fence (envelope version 5, fence.go) has "fence" instead of "op" and
// "ops":
//
//	{"seq":9,"id":"<32 hex>","t":<unix ns>,"fence":{"to":"v2"}}
type entry struct {
	Seq   uint64    `json:"seq"`
	ID    string    `json:"id"`
	Time  int64     `json:"t"`
	Op    *op       `json:"op,omitempty"`
	Ops   []op      `json:"ops,omitempty"`
	Fence *fenceRec `json:"fence,omitempty"`
}

// ops returns the ops of e, in order.
func (e *entry) ops() []op {
	if e.Op != nil {
		return []op{*e.Op}
	}
	return e.Ops
}

// newEntry is the entry of ops: "op" for one, "ops" for more.
func newEntry(seq uint64, id string, t int64, ops []op) *entry {
	e := &entry{Seq: seq, ID: id, Time: t}
	if len(ops) == 1 {
		o := ops[0]
		e.Op = &o
	} else {
		e.Ops = append([]op(nil), ops...)
	}
	return e
}

// op is one change. Which fields a kind uses is documented at its apply
// function in state.go; unused fields are omitted.
type op struct {
	Kind      string   `json:"k"`
	Ino       Ino      `json:"i,omitempty"`
	Parent    Ino      `json:"p,omitempty"`
	Name      bname    `json:"n,omitempty"`
	NewParent Ino      `json:"np,omitempty"`
	NewName   bname    `json:"nn,omitempty"`
	Mode      uint32   `json:"m,omitempty"`
	Uid       uint32   `json:"u,omitempty"`
	Gid       uint32   `json:"g,omitempty"`
	FileID    string   `json:"f,omitempty"`
	Target    bname    `json:"l,omitempty"`
	Flags     uint32   `json:"fl,omitempty"`
	Attr      *attrRec `json:"a,omitempty"`
	Value     []byte   `json:"v,omitempty"`
	Type      Kind     `json:"ty,omitempty"` // mknod: KindFIFO, KindSocket, KindCharDev or KindBlockDev
	Major     uint32   `json:"ma,omitempty"` // mknod of a device: its number (envelope version 4)
	Minor     uint32   `json:"mi,omitempty"`
}

// attrRec is the change of a setattr: nil fields are left alone.
type attrRec struct {
	Mode  *uint32 `json:"m,omitempty"`
	Uid   *uint32 `json:"u,omitempty"`
	Gid   *uint32 `json:"g,omitempty"`
	Atime *int64  `json:"at,omitempty"`
	Mtime *int64  `json:"mt,omitempty"`
	Ctime *int64  `json:"ct,omitempty"`
}

func encodeEntry(e *entry) []byte {
	body, err := json.Marshal(e)
	if err != nil {
		// Every field has a total encoding; failing here is a bug.
		panic(fmt.Sprintf("namespace: encode entry: %v", err))
	}
	return seal(kindEntry, e.version(), body)
}

// mknods says whether e holds a mknod op (so needs envelope version 3 or 4).
func (e *entry) mknods() bool {
	for _, o := range e.ops() {
		if o.Kind == opMknod {
			return true
		}
	}
	return false
}

// mknodsDevice says whether e holds a mknod of a device (so needs envelope
// version 4).
func (e *entry) mknodsDevice() bool {
	for _, o := range e.ops() {
		if o.Kind == opMknod && o.Type.device() {
			return true
		}
	}
	return false
}

// version is the envelope version e is written in.
func (e *entry) version() byte {
	switch {
	case e.Fence != nil:
		return envVersionFence
	case e.mknodsDevice():
		return envVersionDevs
	case e.mknods():
		return envVersionNodes
	case e.Op == nil:
		return envVersionOps
	}
	return envVersion
}

// decodeEntry parses the log entry stored under key. wantSeq 0 skips the
// check that the body's seq matches the key.
func decodeEntry(key string, wantSeq uint64, data []byte) (*entry, error) {
	body, version, err := unseal(key, kindEntry, data)
	if err != nil {
		return nil, err
	}
	var e entry
	if err := decodeJSON(key, body, &e); err != nil {
		return nil, err
	}
	if version == envVersionFence || e.Fence != nil {
		return decodeFence(key, wantSeq, version, &e)
	}
	if version < envVersionNodes && (version == envVersionOps) != (e.Ops != nil) {
		return nil, corruptf(key, "format version %d with \"op\"=%v and \"ops\"=%v", version, e.Op != nil, e.Ops != nil)
	}
	if e.Seq == 0 {
		return nil, corruptf(key, "seq 0")
	}
	if wantSeq != 0 && e.Seq != wantSeq {
		return nil, corruptf(key, "entry says seq %d", e.Seq)
	}
	if !validID(e.ID) {
		return nil, corruptf(key, "bad change id %q", e.ID)
	}
	switch {
	case e.Op != nil && e.Ops != nil:
		return nil, corruptf(key, "both \"op\" and \"ops\"")
	case e.Op == nil && e.Ops == nil:
		return nil, corruptf(key, "neither \"op\" nor \"ops\"")
	case e.Op == nil && len(e.Ops) < 2:
		return nil, corruptf(key, "\"ops\" of %d ops (one op is \"op\")", len(e.Ops))
	case len(e.Ops) > maxEntryOps:
		return nil, corruptf(key, "%d ops, at most %d", len(e.Ops), maxEntryOps)
	}
	if version >= envVersionNodes && version != e.version() {
		return nil, corruptf(key, "format version %d for an entry of version %d (mknod: %v, of a device: %v)",
			version, e.version(), e.mknods(), e.mknodsDevice())
	}
	for i, o := range e.ops() {
		switch o.Kind {
		case opCreate, opMkdir, opSymlink, opLink, opUnlink, opRmdir, opRename,
			opSetAttr, opSetXattr, opRemoveXattr, opForget:
		case opMknod:
			if version < envVersionNodes {
				return nil, corruptf(key, "op %d: mknod in format version %d", i, version)
			}
			if err := checkDevice(o.Type, o.Major, o.Minor); err != nil {
				return nil, corruptf(key, "op %d: %v", i, err)
			}
		default:
			return nil, corruptf(key, "op %d: unknown operation %q", i, o.Kind)
		}
		if (o.Major != 0 || o.Minor != 0) && o.Kind != opMknod {
			return nil, corruptf(key, "op %d: a device number in a %s", i, o.Kind)
		}
		if o.Kind == opSetAttr && o.Attr == nil {
			return nil, corruptf(key, "op %d: setattr without attributes", i)
		}
		if o.Type != 0 && o.Kind != opMknod {
			return nil, corruptf(key, "op %d: a type in a %s", i, o.Kind)
		}
	}
	return &e, nil
}

// Snapshot body: the whole state as of entry seq, nodes sorted by ino,
// directory entries and attributes sorted by name. Link counts and orphans
// are derived, not stored, so that they cannot disagree with the tree.
//
//	{"seq":1000,"nodes":[{"i":1,"k":2,"m":493,...,"c":[{"n":"a","i":65536,"c":65536}]}]}
type snapRec struct {
	Seq   uint64    `json:"seq"`
	Nodes []nodeRec `json:"nodes"`
}

type nodeRec struct {
	Ino      Ino         `json:"i"`
	Kind     Kind        `json:"k"`
	Mode     uint32      `json:"m"`
	Uid      uint32      `json:"u"`
	Gid      uint32      `json:"g"`
	Atime    int64       `json:"at"`
	Mtime    int64       `json:"mt"`
	Ctime    int64       `json:"ct"`
	MtimeSet int64       `json:"ms,omitempty"`
	FileID   string      `json:"f,omitempty"`
	Target   bname       `json:"l,omitempty"`
	Major    uint32      `json:"ma,omitempty"` // devices (envelope version 4)
	Minor    uint32      `json:"mi,omitempty"`
	Xattrs   []xattrRec  `json:"x,omitempty"`
	Children []direntRec `json:"c,omitempty"`
}

type xattrRec struct {
	Name  bname  `json:"n"`
	Value []byte `json:"v"`
}

type direntRec struct {
	Name   bname  `json:"n"`
	Ino    Ino    `json:"i"`
	Cookie uint64 `json:"c"`
}

func encodeSnapshot(st *state) []byte {
	body, err := json.Marshal(st.record())
	if err != nil {
		panic(fmt.Sprintf("namespace: encode snapshot: %v", err))
	}
	return seal(kindSnapshot, st.version(), body)
}

// holdsSpecial says whether st has a FIFO or socket node (so its snapshot
// needs envelope version 3, or 4 with a device).
func (st *state) holdsSpecial() bool {
	for _, n := range st.nodes {
		if n.kind.special() {
			return true
		}
	}
	return false
}

// holdsDevice says whether st has a device node (so its snapshot needs
// envelope version 4).
func (st *state) holdsDevice() bool {
	for _, n := range st.nodes {
		if n.kind.device() {
			return true
		}
	}
	return false
}

// version is the envelope version a snapshot of st is written in.
func (st *state) version() byte {
	switch {
	case st.holdsDevice():
		return envVersionDevs
	case st.holdsSpecial():
		return envVersionNodes
	}
	return envVersion
}

// decodeSnapshot parses and checks a snapshot; wantSeq 0 skips the check
// against the key.
func decodeSnapshot(key string, wantSeq uint64, data []byte) (*state, error) {
	body, version, err := unseal(key, kindSnapshot, data)
	if err != nil {
		return nil, err
	}
	var rec snapRec
	if err := decodeJSON(key, body, &rec); err != nil {
		return nil, err
	}
	if wantSeq != 0 && rec.Seq != wantSeq {
		return nil, corruptf(key, "snapshot says seq %d", rec.Seq)
	}
	st, err := stateFromRecord(&rec)
	if err != nil {
		return nil, corruptf(key, "%v", err)
	}
	if version != st.version() {
		return nil, corruptf(key, "format version %d for a snapshot of version %d (FIFO or socket nodes: %v, device nodes: %v)",
			version, st.version(), st.holdsSpecial(), st.holdsDevice())
	}
	return st, nil
}

// NewFileID returns a new random 128-bit file id in lower-case hex; the file's
// data lives under <root>/f/<id>/.
func NewFileID() string { return randomID() }

func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms.
		panic(fmt.Sprintf("namespace: random id: %v", err))
	}
	return hex.EncodeToString(b[:])
}

func validID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
