package nsv2

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"unicode/utf8"

	"github.com/ckptfs/ckptfs/fs/namespace"
)

// Envelope constants (see the package doc). These are part of the format.
const (
	envMagic     = "CKN2"
	envVersion   = 1
	envHeaderLen = 16
)

// kindVersion is the envelope version of each kind: envVersion but for the
// inode object, 2 since hard links (an inode object may be locked by a
// change of several names, and its nl may be 0: see Inode). A build before
// them reads only version 1 and refuses an inode object as "unknown format
// version 2" (EIO on that node's names) rather than take a lock's old body,
// or a node with no names, for the node; and it changes no node of several
// names (it answers ENOTSUP). No build wrote a version-1 inode object, and
// this one refuses one.
func kindVersion(kind byte) byte {
	if kind == kindInode {
		return 2
	}
	return envVersion
}

// Object kinds, the envelope's kind byte.
const (
	kindDentry   byte = 1
	kindInode    byte = 2
	kindDecision byte = 3
	kindBatch    byte = 4
	kindLease    byte = 5
	kindSeal     byte = 6
	kindDigest   byte = 7
	kindOrphan   byte = 8
	kindMove     byte = 9
	kindRoot     byte = 10 // root.go
)

// maxBody bounds the body of each kind of object, so that a damaged length
// never makes a reader allocate more. A dentry or decision holds up to
// 2 + MaxOps nodes, each with up to namespace.MaxXattrsLen of attributes;
// a digest up to MaxDigestNames names.
var maxBody = map[byte]int{
	kindDentry:   16 << 20,
	kindInode:    16 << 20, // a locked one holds its change's op list
	kindDecision: 16 << 20,
	kindBatch:    4 << 10,
	kindLease:    4 << 10,
	kindSeal:     4 << 10,
	kindDigest:   64 << 20,
	kindOrphan:   4 << 10,
	kindMove:     4 << 10,
	kindRoot:     2 << 20, // up to namespace.MaxXattrsLen of attributes, each byte up to 6 in JSON
}

var kindNames = map[byte]string{
	kindDentry: "dentry", kindInode: "inode object", kindDecision: "decision", kindBatch: "batch claim",
	kindLease: "lease", kindSeal: "seal", kindDigest: "digest", kindOrphan: "orphan record",
	kindMove: "moves log entry", kindRoot: "root's attributes",
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func corruptf(key, format string, args ...any) error {
	return &namespace.CorruptError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

func invalidf(kind byte, format string, args ...any) error {
	return fmt.Errorf("encode %s: %s: %w", kindNames[kind], fmt.Sprintf(format, args...), namespace.ErrInvalid)
}

// encode checks v with check, then seals its JSON body as kind.
func encode(kind byte, v any, check func() error) ([]byte, error) {
	if err := check(); err != nil {
		return nil, invalidf(kind, "%v", err)
	}
	body, err := json.Marshal(v)
	if err != nil {
		// Every field has a total encoding; failing here is a bug.
		panic(fmt.Sprintf("nsv2: encode %s: %v", kindNames[kind], err))
	}
	if len(body) > maxBody[kind] {
		return nil, invalidf(kind, "body of %d bytes, over %d", len(body), maxBody[kind])
	}
	out := make([]byte, envHeaderLen+len(body))
	copy(out, envMagic)
	out[4] = kindVersion(kind)
	out[5] = kind
	binary.LittleEndian.PutUint32(out[8:], uint32(len(body)))
	copy(out[envHeaderLen:], body)
	binary.LittleEndian.PutUint32(out[12:], checksum(out[:12], body))
	return out, nil
}

func checksum(header, body []byte) uint32 {
	return crc32.Update(crc32.Checksum(header, castagnoli), castagnoli, body)
}

// decode checks the envelope of data read from key, decodes its body into v
// strictly, and runs check on the result.
func decode(key string, kind byte, data []byte, v any, check func() error) error {
	if len(data) < envHeaderLen {
		return corruptf(key, "%d bytes, shorter than the %d-byte header", len(data), envHeaderLen)
	}
	if string(data[:4]) != envMagic {
		return corruptf(key, "bad magic %q", data[:4])
	}
	if data[5] != kind {
		return corruptf(key, "object kind %d, want %d (%s)", data[5], kind, kindNames[kind])
	}
	if data[4] != kindVersion(kind) {
		return corruptf(key, "unknown format version %d of %s, this build reads %d", data[4], kindNames[kind], kindVersion(kind))
	}
	if binary.LittleEndian.Uint16(data[6:]) != 0 {
		return corruptf(key, "reserved header bytes are not zero")
	}
	n := binary.LittleEndian.Uint32(data[8:])
	if int64(n) > int64(maxBody[kind]) {
		return corruptf(key, "body length %d, over the %s's %d", n, kindNames[kind], maxBody[kind])
	}
	if int64(n) != int64(len(data)-envHeaderLen) {
		return corruptf(key, "body length %d, object holds %d", n, len(data)-envHeaderLen)
	}
	body := data[envHeaderLen:]
	if got, want := binary.LittleEndian.Uint32(data[12:]), checksum(data[:12], body); got != want {
		return corruptf(key, "checksum %08x, computed %08x", got, want)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return corruptf(key, "decode body: %v", err)
	}
	if dec.More() || dec.InputOffset() != int64(len(body)) {
		return corruptf(key, "data after the body")
	}
	if err := check(); err != nil {
		return corruptf(key, "%v", err)
	}
	return nil
}

// Name is a name, symlink target or attribute name: POSIX allows any bytes,
// JSON strings only UTF-8. Valid UTF-8 is a JSON string; anything else is
// {"b":"<base64>"}, so that every byte survives.
type Name string

func (b Name) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(b)) {
		return json.Marshal(string(b))
	}
	return json.Marshal(struct {
		B []byte `json:"b"`
	}{[]byte(b)})
}

func (b *Name) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = Name(s)
		return nil
	}
	var raw struct {
		B *string `json:"b"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if raw.B == nil {
		return fmt.Errorf("name is neither a string nor {\"b\":...}")
	}
	v, err := base64.StdEncoding.DecodeString(*raw.B)
	if err != nil {
		return fmt.Errorf("name: %w", err)
	}
	*b = Name(v)
	return nil
}
