// Package dir is the directory backend of staging: objects kept as files
// under a local root, the store of a volume used without any bucket. Its
// on-disk layout is documented on Store.
package dir

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/staging"
)

// ErrCorrupt: a file of a directory store is not what the store writes (a
// commit record that does not parse, a data file of the wrong size).
var ErrCorrupt = errors.New("corrupt store file")

// Store is a staging.Store of files under a root directory: the embedded
// default store, used without any bucket. Several processes may share one
// root; conditional writes hold across them.
//
// # Layout
//
// Each segment of a key is a folder or file name, escaped so that it never
// contains '~' ('%' becomes "%25", '~' becomes "%7E"). An object is two files
// in the folder of its key:
//
//	<root>/<seg1>/.../<last>~meta   commit record (JSON, below)
//	<root>/<seg1>/.../<last>~<id>   data: exactly the object's bytes
//
// Folder names never contain '~' and file names always do, so that "a" and
// "a/b" are both possible objects, as in S3. The commit record names the data
// file; a write creates a new data file under a fresh id, then renames a new
// commit record over the old one (the atomic step), then removes the old data
// file. A reader reads the record, then opens the data file it names; if a
// writer removed that file in between, the reader reads the record again.
//
// An object of at most inlineMax bytes (a namespace entry, a head, a small
// part 0: most writes of a mount of many small files) has no data file: its
// bytes follow the record in the record's own file (version 2), so a write
// costs two fsyncs (the record, its folder) instead of three, and a read one
// open instead of two.
//
// The commit record, these field names are part of the format:
//
//	{"v":1,                         format version: 1, data in a data file
//	 "etag":"\"<32 hex>\"",         random per write
//	 "size":123,                    bytes of the data file
//	 "modified":"<RFC 3339>",
//	 "data":"<last>~<32 hex>",      data file, in the same folder
//	 "metadata":{"k":"v"}}          user metadata, omitted when empty
//
// and of an object held in its record (no "data" field; json.Marshal never
// writes a raw newline, so the first newline ends the JSON):
//
//	+-------------------------------------------+----+----------------+
//	| {"v":2,"etag":..,"size":N,"modified":..}  | \n | N bytes: data  |
//	+-------------------------------------------+----+----------------+
//
// A version-1 record has no newline. A record is at most recordHeadMax
// bytes before its newline, and its file at most recordHeadMax+inlineMax+1:
// anything longer is refused as corrupt before it is read.
//
// What is not an object lives under <root>/.ckptfs-staging/ (ReservedPrefix,
// which no key may start with):
//
//	tmp/<id>...                     upload parts and records being written
//	locks/<00..ff>                  flock(2) stripes, by xxh3 of the key
//	uploads/<upload id>/upload      upload record: {"v":1,"key":..,"metadata":..,"initiated":..}
//	uploads/<upload id>/<n>-<id>    part n (5 decimal digits), ETag "<id>", in a file of its own
//	uploads/<upload id>/stride      symbolic link whose target is S, decimal: the length
//	                                of the first part of at least MinPartSize bytes
//	uploads/<upload id>/data        parts written in place: part n at (n-1)*S
//	uploads/<upload id>/<n>-<id>.<len>  empty marker: part n is len (<= S) bytes of data
//	uploads/<upload id>/lock-<n>    flock(2) of part n's place
//
// A part goes into data if the stride is set and it is not longer than S,
// and into a file of its own otherwise, or when its place was written
// before (a place is written once, so a marker never names bytes a later
// write changed). A complete of parts 1..k, all in place and of S bytes but
// the last, cuts data to its length and links it as the object's data file:
// a sequential writer's object is never copied. Any other complete copies
// the parts into a new data file, as every complete once did.
//
// Conditional writes take the key's stripe lock around check and rename, so
// they hold between goroutines and processes alike (flock locks belong to an
// open file description, and every operation opens its own). Upload
// operations lock the upload record the same way: a part written in place
// shared, everything else exclusively.
//
// Limits beyond ValidateKey: an escaped segment is at most 200 bytes (file
// names are at most 255). A crash during a write can leave an unreferenced
// data file beside the object, which no operation sees or removes; a crash
// while writing a part leaves a file in tmp/, removed by New after a day.
// Folders emptied by Delete stay (removing them would race with writers).
type Store struct {
	root   string // absolute
	sys    string // root/.ckptfs-staging
	noSync bool
	// syncHook, if set, runs before each fsync of a folder and fails it with
	// its error: tests use it to fail the sync that makes a commit durable.
	syncHook func(dir string) error
	// listHook, if set, is told every folder List reads: tests count them.
	listHook func(dir string)
}

// Options are the options of a directory store.
type Options struct {
	// NoSync skips fsync(2): faster, for tests and scratch volumes. Writes
	// stay atomic while the machine runs; a machine crash may lose recent
	// writes or leave a commit record naming a short data file, which Get
	// then reports as ErrCorrupt.
	NoSync bool
}

var _ staging.Store = (*Store)(nil)

const (
	dirFormatVersion = 1 // a record naming a data file
	dirInlineVersion = 2 // a record followed by the object's bytes
	// inlineMax is the largest object held in its commit record.
	inlineMax = 128 << 10
	// recordHeadMax bounds a record's JSON: its fields with the largest
	// metadata take under 3 KiB.
	recordHeadMax = 16 << 10
	metaSuffix    = "~meta"
	maxEscapedSeg = 200
	uploadRecord  = "upload"
	uploadData    = "data"
	strideLink    = "stride"
	// maxStride is S3's largest part: no stride, and no part in place, is
	// longer.
	maxStride   = 5 << 30
	staleTmpAge = 24 * time.Hour
	lockStripes = 256
	// readRetries bounds how often a reader follows a commit record whose
	// data file was replaced meanwhile; only a key rewritten without pause
	// can exhaust it.
	readRetries = 100
	// Everything a store creates is the mounting user's alone: the objects
	// are the files' contents, which the mount's own permissions guard.
	dirPerm  = 0o700
	filePerm = 0o600
)

// New opens (creating it if needed) a directory store at root; every
// acknowledged write is synced to disk. What the store creates, the root
// included, is private to the user running it (folders 0700, files 0600); a
// root others can write is refused. The mode of an existing root is left as
// it is.
func New(root string) (*Store, error) { return NewWith(root, Options{}) }

// NewWith is New with options.
func NewWith(root string, o Options) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("directory store %s: %w", root, err)
	}
	d := &Store{root: abs, sys: filepath.Join(abs, strings.TrimSuffix(staging.ReservedPrefix, "/")), noSync: o.NoSync}
	if err := os.MkdirAll(abs, dirPerm); err != nil {
		return nil, fmt.Errorf("directory store %s: %w", abs, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("directory store %s: %w", abs, err)
	}
	switch {
	case !st.IsDir():
		return nil, fmt.Errorf("directory store %s: not a directory", abs)
	case st.Mode().Perm()&0o002 != 0:
		// Anyone could then replace commit records or swap folders for
		// links: the store's data would be theirs to choose.
		return nil, fmt.Errorf("directory store %s: writable by others (mode %04o): remove that with chmod o-w %s, or use a private directory",
			abs, st.Mode().Perm(), abs)
	}
	for _, sub := range []string{"tmp", "locks", "uploads"} {
		if err := os.MkdirAll(filepath.Join(d.sys, sub), dirPerm); err != nil {
			return nil, fmt.Errorf("directory store %s: %w", root, err)
		}
	}
	d.removeStaleTmp()
	return d, nil
}

// Root is the directory the store keeps its files under.
func (d *Store) Root() string { return d.root }

// removeStaleTmp removes what crashed writers left in tmp/. A live writer
// keeps a temporary file for seconds, never a day.
func (d *Store) removeStaleTmp() {
	dir := filepath.Join(d.sys, "tmp")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTmpAge {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// escapeSeg makes a key segment a file name without '~'.
func escapeSeg(s string) string {
	if !strings.ContainsAny(s, "%~") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%':
			b.WriteString("%25")
		case '~':
			b.WriteString("%7E")
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// unescapeSeg inverts escapeSeg; ok is false for a name escapeSeg cannot
// produce (a file of someone else's).
func unescapeSeg(s string) (string, bool) {
	if strings.IndexByte(s, '~') >= 0 {
		return "", false
	}
	if strings.IndexByte(s, '%') < 0 {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%7E"):
			b.WriteByte('~')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// objPath is where the files of one key live.
type objPath struct {
	key  string
	dir  string // absolute folder
	base string // escaped last segment
}

func (p objPath) meta() string              { return filepath.Join(p.dir, p.base+metaSuffix) }
func (p objPath) dataName(id string) string { return p.base + "~" + id }

func (d *Store) path(key string) (objPath, error) {
	if err := staging.ValidateKey(key); err != nil {
		return objPath{}, err
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = escapeSeg(s)
		if len(segs[i]) > maxEscapedSeg {
			return objPath{}, fmt.Errorf("key %q: segment of %d bytes, more than a directory store's %d: %w",
				staging.TruncKey(key), len(segs[i]), maxEscapedSeg, staging.ErrInvalidKey)
		}
	}
	n := len(segs) - 1
	return objPath{key: key, dir: filepath.Join(append([]string{d.root}, segs[:n]...)...), base: segs[n]}, nil
}

// dirMeta is the commit record of an object (format in the Store doc).
type dirMeta struct {
	Version  int               `json:"v"`
	ETag     string            `json:"etag"`
	Size     int64             `json:"size"`
	Modified time.Time         `json:"modified"`
	Data     string            `json:"data,omitempty"` // version 1 only
	Metadata map[string]string `json:"metadata,omitempty"`
}

// decodeStrict decodes b, one record of the store's own (what, in errors),
// as a T: a field T does not have, or anything after the record, makes it
// ErrCorrupt, as does JSON that does not parse.
func decodeStrict[T any](b []byte, what string) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("%s: %v: %w", what, err, ErrCorrupt)
	}
	if dec.More() {
		return v, fmt.Errorf("%s: data after the record: %w", what, ErrCorrupt)
	}
	return v, nil
}

// parseMeta parses and checks a commit record.
func parseMeta(b []byte) (dirMeta, error) {
	m, err := decodeStrict[dirMeta](b, "commit record")
	if err != nil {
		return dirMeta{}, err
	}
	switch {
	case m.Version != dirFormatVersion && m.Version != dirInlineVersion:
		return dirMeta{}, fmt.Errorf("commit record: version %d, want %d or %d: %w", m.Version, dirFormatVersion, dirInlineVersion, ErrCorrupt)
	case m.ETag == "":
		return dirMeta{}, fmt.Errorf("commit record: no ETag: %w", ErrCorrupt)
	case m.Size < 0:
		return dirMeta{}, fmt.Errorf("commit record: size %d: %w", m.Size, ErrCorrupt)
	case m.Version == dirInlineVersion && m.Data != "":
		return dirMeta{}, fmt.Errorf("commit record: version %d names a data file: %w", m.Version, ErrCorrupt)
	case m.Version == dirInlineVersion && m.Size > inlineMax:
		return dirMeta{}, fmt.Errorf("commit record: %d bytes held in the record, at most %d: %w", m.Size, inlineMax, ErrCorrupt)
	case m.Version == dirFormatVersion && (m.Data == "" || strings.ContainsAny(m.Data, "/\x00") || !strings.Contains(m.Data, "~") ||
		strings.HasSuffix(m.Data, metaSuffix) || m.Data == "." || m.Data == ".."):
		return dirMeta{}, fmt.Errorf("commit record: data file %q: %w", m.Data, ErrCorrupt)
	}
	if err := staging.ValidateMetadata(m.Metadata); err != nil {
		return dirMeta{}, fmt.Errorf("commit record: %v: %w", err, ErrCorrupt)
	}
	return m, nil
}

// readMeta reads the commit record of p; ErrNotFound if there is none.
func (d *Store) readMeta(p objPath) (dirMeta, error) {
	m, _, err := d.readRecord(p, false)
	return m, err
}

// readRecord reads the commit record of p and, when withData, the bytes of
// an object held in it (nil for one in a data file); ErrNotFound if there is
// none. Only the record's JSON is read without withData.
func (d *Store) readRecord(p objPath, withData bool) (dirMeta, []byte, error) {
	f, err := os.Open(p.meta())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return dirMeta{}, nil, staging.ErrNotFound
		}
		return dirMeta{}, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return dirMeta{}, nil, err
	}
	n := st.Size()
	if n > recordHeadMax+inlineMax+1 {
		return dirMeta{}, nil, fmt.Errorf("%s: commit record of %d bytes: %w", p.meta(), n, ErrCorrupt)
	}
	if !withData {
		n = min(n, recordHeadMax+1)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		// Records are replaced by rename, never rewritten: a short read is
		// a file changed under the store.
		return dirMeta{}, nil, fmt.Errorf("%s: read commit record: %v: %w", p.meta(), err, ErrCorrupt)
	}
	m, data, err := parseRecord(b, st.Size())
	if err != nil {
		return dirMeta{}, nil, fmt.Errorf("%s: %w", p.meta(), err)
	}
	if !withData {
		data = nil
	}
	return m, data, nil
}

// parseRecord parses the first bytes b of a commit record file of size
// bytes (b is all of it for a record followed by its data, when that is
// wanted) and checks that they agree. It returns the object's bytes held in
// the record, as far as b has them.
func parseRecord(b []byte, size int64) (dirMeta, []byte, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if int64(len(b)) < size {
			return dirMeta{}, nil, fmt.Errorf("commit record: no end in its first %d bytes: %w", len(b), ErrCorrupt)
		}
		m, err := parseMeta(b)
		if err != nil {
			return dirMeta{}, nil, err
		}
		if m.Version != dirFormatVersion {
			return dirMeta{}, nil, fmt.Errorf("commit record: version %d without its data: %w", m.Version, ErrCorrupt)
		}
		return m, nil, nil
	}
	m, err := parseMeta(b[:i])
	if err != nil {
		return dirMeta{}, nil, err
	}
	if m.Version != dirInlineVersion {
		return dirMeta{}, nil, fmt.Errorf("commit record: version %d followed by data: %w", m.Version, ErrCorrupt)
	}
	if held := size - int64(i+1); held != m.Size {
		return dirMeta{}, nil, fmt.Errorf("commit record: holds %d bytes, says %d: %w", held, m.Size, ErrCorrupt)
	}
	return m, b[i+1:], nil
}

func (m dirMeta) info(key string) staging.ObjectInfo {
	return staging.ObjectInfo{Key: key, Size: m.Size, ETag: m.ETag, LastModified: m.Modified, Metadata: maps.Clone(m.Metadata)}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// lock takes an exclusive flock on name (created if missing) and returns
// its release.
func lock(name string) (func(), error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

func (d *Store) lockKey(key string) (func(), error) {
	stripe := xxh3.HashString(key) % lockStripes
	return lock(filepath.Join(d.sys, "locks", fmt.Sprintf("%02x", stripe)))
}

// writeTmp writes data to a new file in tmp/ and syncs it.
func (d *Store) writeTmp(name string, data []byte) (string, error) {
	path := filepath.Join(d.sys, "tmp", name)
	return path, d.writeNew(path, data)
}

// writeNew writes data to a new file at path and syncs it; on failure the
// file is removed.
func (d *Store) writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && !d.noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// mkdirs creates dir and its missing parents under root, syncing the parent
// of each folder it creates so that the folder survives a crash.
func (d *Store) mkdirs(dir string) error {
	if dir == d.root {
		return nil
	}
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := d.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, dirPerm); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return d.syncDir(parent)
}

func (d *Store) syncDir(dir string) error {
	if d.syncHook != nil {
		if err := d.syncHook(dir); err != nil {
			return err
		}
	}
	if d.noSync {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// publish makes the synced data file p.dataName(id), written in place
// (unreferenced, so invisible), the object p if cond holds.
func (d *Store) publish(p objPath, id string, size int64, md map[string]string, cond staging.Conditions) (staging.ObjectInfo, error) {
	meta := dirMeta{Version: dirFormatVersion, ETag: `"` + id + `"`, Size: size, Modified: time.Now().UTC(), Data: p.dataName(id), Metadata: md}
	return d.commit(p, meta, nil, cond)
}

// publishInline makes data, held in the record, the object p if cond holds.
func (d *Store) publishInline(p objPath, data []byte, md map[string]string, cond staging.Conditions) (staging.ObjectInfo, error) {
	meta := dirMeta{Version: dirInlineVersion, ETag: `"` + newID() + `"`, Size: int64(len(data)), Modified: time.Now().UTC(), Metadata: md}
	return d.commit(p, meta, data, cond)
}

// commit writes the record meta (followed by inline, for an object held in
// it) and renames it into place if cond holds, under the key's lock. On
// failure before the rename the record and the data file it names are
// removed; after it (the folder's sync failed) the data file stays, since
// the record names it.
func (d *Store) commit(p objPath, meta dirMeta, inline []byte, cond staging.Conditions) (_ staging.ObjectInfo, err error) {
	// No "~meta" suffix: never listed.
	tmpMeta := filepath.Join(p.dir, p.dataName(strings.Trim(meta.ETag, `"`))+".meta-tmp")
	committed := false // the record naming the data is in place
	defer func() {
		if err != nil && !committed {
			if meta.Data != "" {
				os.Remove(filepath.Join(p.dir, meta.Data))
			}
			os.Remove(tmpMeta)
		}
	}()
	rec, err := json.Marshal(meta)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	if meta.Version == dirInlineVersion {
		rec = append(append(rec, '\n'), inline...)
	}
	if err := d.writeNew(tmpMeta, rec); err != nil {
		return staging.ObjectInfo{}, err
	}
	unlock, err := d.lockKey(p.key)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	defer unlock()
	old, err := d.readMeta(p)
	exists := err == nil
	if err != nil && !errors.Is(err, staging.ErrNotFound) {
		return staging.ObjectInfo{}, err
	}
	if err := staging.CheckConditions(cond, exists, func() string { return old.ETag }); err != nil {
		return staging.ObjectInfo{}, err
	}
	// Data and record are in one folder: the renames need no file-system-wide
	// lock, and one sync of the folder makes both durable.
	if err := os.Rename(tmpMeta, p.meta()); err != nil {
		return staging.ObjectInfo{}, err
	}
	// From here the record names the new data file: it must never be
	// removed, whatever fails next.
	committed = true
	if err := d.syncDir(p.dir); err != nil {
		// Readers see the new object, but a crash may bring the old record
		// back, so its data file stays too (unreferenced if no crash comes,
		// as after a crash during a write). The caller cannot tell whether
		// the write will last: like a lost answer.
		return staging.ObjectInfo{}, fmt.Errorf("committed, but syncing folder %s failed, so the write may not survive a crash: %w", p.dir, err)
	}
	if exists && old.Data != "" && old.Data != meta.Data {
		_ = os.Remove(filepath.Join(p.dir, old.Data)) // readers holding it open keep reading
	}
	return meta.info(p.key), nil
}

func (d *Store) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if err := staging.CheckWrite(ctx, "put", key, opts.Metadata); err != nil {
		return staging.ObjectInfo{}, err
	}
	p, err := d.path(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("put: %w", err)
	}
	if err := d.mkdirs(p.dir); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	if len(data) <= inlineMax {
		info, err := d.publishInline(p, data, maps.Clone(opts.Metadata), opts.Conditions)
		if err != nil {
			return staging.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
		}
		return info, nil
	}
	id := newID()
	if err := d.writeNew(filepath.Join(p.dir, p.dataName(id)), data); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		os.Remove(filepath.Join(p.dir, p.dataName(id)))
		return staging.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	info, err := d.publish(p, id, int64(len(data)), maps.Clone(opts.Metadata), opts.Conditions)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	return info, nil
}

// open returns the commit record of p and either the object's bytes held
// in it or its data file, opened.
func (d *Store) open(p objPath) (dirMeta, []byte, *os.File, error) {
	for range readRetries {
		m, inline, err := d.readRecord(p, true)
		if err != nil {
			return dirMeta{}, nil, nil, err
		}
		if m.Version == dirInlineVersion {
			return m, inline, nil, nil
		}
		f, err := os.Open(filepath.Join(p.dir, m.Data))
		if errors.Is(err, fs.ErrNotExist) {
			continue // replaced meanwhile: read the new record
		}
		if err != nil {
			return dirMeta{}, nil, nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return dirMeta{}, nil, nil, err
		}
		if st.Size() != m.Size {
			f.Close()
			return dirMeta{}, nil, nil, fmt.Errorf("data file %s is %d bytes, its record says %d: %w", m.Data, st.Size(), m.Size, ErrCorrupt)
		}
		return m, nil, f, nil
	}
	return dirMeta{}, nil, nil, fmt.Errorf("replaced %d times while being read", readRetries)
}

func (d *Store) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	if err := staging.CheckRead(ctx, "get", key); err != nil {
		return nil, staging.ObjectInfo{}, err
	}
	p, err := d.path(key)
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("get: %w", err)
	}
	m, inline, f, err := d.open(p)
	if err != nil {
		return nil, staging.ObjectInfo{}, fmt.Errorf("get %s: %w", key, err)
	}
	off, n, err := r.Resolve(m.Size)
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, staging.ObjectInfo{}, fmt.Errorf("get %s: %w", key, err)
	}
	if f == nil {
		return append([]byte(nil), inline[off:off+n]...), m.info(key), nil
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil && !(err == io.EOF && n == 0) {
		return nil, staging.ObjectInfo{}, fmt.Errorf("get %s: read %s: %w", key, m.Data, err)
	}
	return buf, m.info(key), nil
}

func (d *Store) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	if err := staging.CheckRead(ctx, "head", key); err != nil {
		return staging.ObjectInfo{}, err
	}
	p, err := d.path(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("head: %w", err)
	}
	m, err := d.readMeta(p)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("head %s: %w", key, err)
	}
	return m.info(key), nil
}

func (d *Store) Delete(ctx context.Context, key string) error {
	if err := staging.CheckWrite(ctx, "delete", key, nil); err != nil {
		return err
	}
	p, err := d.path(key)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	unlock, err := d.lockKey(key)
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	defer unlock()
	m, err := d.readMeta(p)
	if errors.Is(err, staging.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := os.Remove(p.meta()); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if m.Data != "" {
		_ = os.Remove(filepath.Join(p.dir, m.Data))
	}
	if err := d.syncDir(p.dir); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}
