package dir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/staging"
)

// dirUpload is the record of an open upload (format in the Store doc).
type dirUpload struct {
	Version   int               `json:"v"`
	Key       string            `json:"key"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Initiated time.Time         `json:"initiated"`
}

func parseUpload(b []byte) (dirUpload, error) {
	u, err := decodeStrict[dirUpload](b, "upload record")
	if err != nil {
		return dirUpload{}, err
	}
	if u.Version != dirFormatVersion {
		return dirUpload{}, fmt.Errorf("upload record: version %d, want %d: %w", u.Version, dirFormatVersion, ErrCorrupt)
	}
	if err := staging.ValidateKey(u.Key); err != nil {
		return dirUpload{}, fmt.Errorf("upload record: %v: %w", err, ErrCorrupt)
	}
	if err := staging.ValidateMetadata(u.Metadata); err != nil {
		return dirUpload{}, fmt.Errorf("upload record: %v: %w", err, ErrCorrupt)
	}
	return u, nil
}

// isID reports whether s is an id newID makes: no path tricks in upload ids.
func isID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (d *Store) uploadDir(id string) string { return filepath.Join(d.sys, "uploads", id) }

func (d *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	if err := staging.CheckWrite(ctx, "create multipart upload", key, opts.Metadata); err != nil {
		return "", err
	}
	if _, err := d.path(key); err != nil {
		return "", fmt.Errorf("create multipart upload: %w", err)
	}
	id := newID()
	rec, err := json.Marshal(dirUpload{Version: dirFormatVersion, Key: key, Metadata: opts.Metadata, Initiated: time.Now().UTC()})
	if err == nil {
		err = os.Mkdir(d.uploadDir(id), dirPerm)
	}
	var tmp string
	if err == nil {
		tmp, err = d.writeTmp(id+"~upload", rec)
	}
	if err == nil {
		// The record appears whole or not at all: ListMultipartUploads skips
		// folders without one.
		err = os.Rename(tmp, filepath.Join(d.uploadDir(id), uploadRecord))
	}
	if err != nil {
		os.RemoveAll(d.uploadDir(id))
		return "", fmt.Errorf("create multipart upload of %s: %w", key, err)
	}
	return id, nil
}

// openUpload locks upload id of key exclusively and returns its record and
// the release of the lock; ErrNotFound if the upload is not open (or is
// another key's).
func (d *Store) openUpload(key, id string) (dirUpload, func(), error) {
	return d.lockUpload(key, id, unix.LOCK_EX)
}

// lockUpload is openUpload with the lock's mode: parts written in place
// hold it shared (several at once), everything else exclusively, so that a
// complete or an abort never runs beside a write into the upload's data.
func (d *Store) lockUpload(key, id string, how int) (dirUpload, func(), error) {
	if !isID(id) {
		return dirUpload{}, nil, fmt.Errorf("upload %q of %s: %w", id, key, staging.ErrNotFound)
	}
	recPath := filepath.Join(d.uploadDir(id), uploadRecord)
	f, err := os.Open(recPath)
	if errors.Is(err, fs.ErrNotExist) {
		return dirUpload{}, nil, fmt.Errorf("upload %s of %s: %w", id, key, staging.ErrNotFound)
	}
	if err != nil {
		return dirUpload{}, nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return dirUpload{}, nil, fmt.Errorf("lock %s: %w", recPath, err)
	}
	release := func() { f.Close() }
	// An abort or complete that held the lock before us removed the upload.
	if _, err := os.Stat(recPath); err != nil {
		release()
		return dirUpload{}, nil, fmt.Errorf("upload %s of %s: %w", id, key, staging.ErrNotFound)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		release()
		return dirUpload{}, nil, err
	}
	u, err := parseUpload(b)
	if err != nil {
		release()
		return dirUpload{}, nil, fmt.Errorf("%s: %w", recPath, err)
	}
	if u.Key != key {
		release()
		return dirUpload{}, nil, fmt.Errorf("upload %s is of %s, not %s: %w", id, u.Key, key, staging.ErrNotFound)
	}
	return u, release, nil
}

func (d *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := staging.CheckWrite(ctx, "upload part", key, nil); err != nil {
		return "", err
	}
	if err := staging.CheckPartNumber(n); err != nil {
		return "", fmt.Errorf("upload part of %s: %w", key, err)
	}
	partID := newID()
	placed, err := d.uploadPartInPlace(key, uploadID, n, partID, data)
	if err != nil {
		return "", fmt.Errorf("upload part %d of %s: %w", n, key, err)
	}
	if placed {
		return `"` + partID + `"`, nil
	}
	tmp, err := d.writeTmp(partID, data)
	if err != nil {
		return "", fmt.Errorf("upload part %d of %s: %w", n, key, err)
	}
	defer os.Remove(tmp) // a no-op once renamed
	_, release, err := d.openUpload(key, uploadID)
	if err != nil {
		return "", fmt.Errorf("upload part %d: %w", n, err)
	}
	defer release()
	dir := d.uploadDir(uploadID)
	old, _ := d.partFiles(dir)
	if err := os.Rename(tmp, filepath.Join(dir, partName(n, partID))); err != nil {
		return "", fmt.Errorf("upload part %d of %s: %w", n, key, err)
	}
	for _, p := range old[n] {
		_ = os.Remove(filepath.Join(dir, p.name(n)))
	}
	return `"` + partID + `"`, nil
}

// uploadPartInPlace writes part n into the upload's data file at (n-1) *
// stride, where a complete whose parts are 1..k, all of stride bytes but the
// last, finds the object's bytes already in order (no copy, a link), and
// records it under a marker. It reports false, having written nothing, for
// a part that is not for there: before any part of at least MinPartSize set
// the stride, longer than the stride, or a part number already written in
// place (a region is written once, so a marker never names bytes a later
// write changed; that part goes to a file of its own, as every part once
// did).
func (d *Store) uploadPartInPlace(key, uploadID string, n int32, partID string, data []byte) (bool, error) {
	_, release, err := d.lockUpload(key, uploadID, unix.LOCK_SH)
	if err != nil {
		return false, err
	}
	defer release()
	dir := d.uploadDir(uploadID)
	stride, err := setStride(dir, int64(len(data)))
	if err != nil || stride == 0 || int64(len(data)) > stride {
		return false, err
	}
	unlock, err := lock(filepath.Join(dir, fmt.Sprintf("lock-%05d", n)))
	if err != nil {
		return false, err
	}
	defer unlock()
	stored, err := d.partFiles(dir)
	if err != nil {
		return false, err
	}
	for _, p := range stored[n] {
		if p.inPlace {
			return false, nil
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, uploadData), os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return false, err
	}
	_, err = f.WriteAt(data, int64(n-1)*stride)
	if err == nil && !d.noSync {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	p := dirPart{id: partID, size: int64(len(data)), inPlace: true}
	m, err := os.OpenFile(filepath.Join(dir, p.name(n)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return false, err
	}
	m.Close()
	for _, old := range stored[n] {
		_ = os.Remove(filepath.Join(dir, old.name(n)))
	}
	return true, nil
}

// setStride returns the upload's stride, setting it to size if it has none
// and size is a whole part's (at least MinPartSize); 0 if it has none. The
// stride is a symbolic link whose target is the number: made whole in one
// step, and never changed.
func setStride(dir string, size int64) (int64, error) {
	link := filepath.Join(dir, strideLink)
	for range 2 {
		t, err := os.Readlink(link)
		if err == nil {
			v, perr := strconv.ParseInt(t, 10, 64)
			if perr != nil || v < staging.MinPartSize || v > maxStride {
				return 0, fmt.Errorf("stride %q of %s: %w", t, dir, ErrCorrupt)
			}
			return v, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		if size < staging.MinPartSize || size > maxStride {
			return 0, nil
		}
		if err := os.Symlink(strconv.FormatInt(size, 10), link); err != nil && !errors.Is(err, fs.ErrExist) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("stride of %s: set and gone", dir)
}

func partName(n int32, id string) string { return fmt.Sprintf("%05d-%s", n, id) }

// dirPart is a part as stored: a file of its own, or a marker naming
// size bytes of the upload's data file at (n-1) * stride.
type dirPart struct {
	id      string
	size    int64
	inPlace bool
}

// name is the part's file name in the upload folder.
func (p dirPart) name(n int32) string {
	if p.inPlace {
		return fmt.Sprintf("%s.%d", partName(n, p.id), p.size)
	}
	return partName(n, p.id)
}

// partFiles returns the parts stored in an upload folder by number: as a
// rule one each, two where a replacement was stopped between its steps.
func (d *Store) partFiles(dir string) (map[int32][]dirPart, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	parts := make(map[int32][]dirPart)
	for _, e := range ents {
		num, rest, ok := strings.Cut(e.Name(), "-")
		if !ok {
			continue
		}
		id, sizeText, inPlace := strings.Cut(rest, ".")
		if !isID(id) {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 32)
		if err != nil || n < 1 || n > staging.MaxParts {
			continue
		}
		p := dirPart{id: id, inPlace: inPlace}
		if inPlace {
			if p.size, err = strconv.ParseInt(sizeText, 10, 64); err != nil || p.size < 0 || p.size > maxStride {
				continue
			}
		} else {
			info, err := e.Info()
			if err != nil {
				return nil, err
			}
			p.size = info.Size()
		}
		parts[int32(n)] = append(parts[int32(n)], p)
	}
	return parts, nil
}

func (d *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if err := staging.CheckWrite(ctx, "complete multipart upload", key, nil); err != nil {
		return staging.ObjectInfo{}, err
	}
	p, err := d.path(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload: %w", err)
	}
	if err := staging.CheckCompletedParts(parts); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	u, release, err := d.openUpload(key, uploadID)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload: %w", err)
	}
	defer release()
	info, err := d.complete(ctx, p, uploadID, u, parts, cond)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	return info, nil
}

// complete publishes the parts as one object: the upload's data file
// itself, linked into place, when the parts are 1..k written in place with
// all but the last of the stride's length; otherwise a new data file the
// parts are copied into. Called with the upload locked.
func (d *Store) complete(ctx context.Context, p objPath, id string, u dirUpload, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	dir := d.uploadDir(id)
	stored, err := d.partFiles(dir)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	chosen := make([]dirPart, len(parts))
	for i, cp := range parts {
		found := false
		for _, sp := range stored[cp.Number] {
			if `"`+sp.id+`"` == cp.ETag {
				chosen[i], found = sp, true
			}
		}
		switch {
		case len(stored[cp.Number]) == 0:
			return staging.ObjectInfo{}, fmt.Errorf("part %d was not uploaded", cp.Number)
		case !found:
			return staging.ObjectInfo{}, fmt.Errorf("part %d has ETag \"%s\", not %s", cp.Number, stored[cp.Number][0].id, cp.ETag)
		case i < len(parts)-1 && chosen[i].size < staging.MinPartSize:
			return staging.ObjectInfo{}, fmt.Errorf("part %d is %d bytes: %w", cp.Number, chosen[i].size, staging.ErrPartTooSmall)
		}
	}
	if err := d.mkdirs(p.dir); err != nil {
		return staging.ObjectInfo{}, err
	}
	dataID := newID()
	target := filepath.Join(p.dir, p.dataName(dataID))
	size, linked, err := d.linkInPlace(dir, parts, chosen, stored, target)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	if !linked {
		if size, err = d.concat(ctx, dir, parts, chosen, target); err != nil {
			return staging.ObjectInfo{}, err
		}
	}
	info, err := d.publish(p, dataID, size, u.Metadata, cond)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("published, but removing the upload: %w", err)
	}
	return info, nil
}

// linkInPlace makes target a link to the upload's data file, cut to the
// object's size, if the chosen parts are the object's bytes in order there
// and nothing stored past them would be cut. It reports false, having
// changed nothing, otherwise.
func (d *Store) linkInPlace(dir string, parts []staging.CompletedPart, chosen []dirPart, stored map[int32][]dirPart, target string) (int64, bool, error) {
	stride, err := setStride(dir, 0)
	if err != nil || stride == 0 {
		return 0, false, err
	}
	for i, cp := range parts {
		last := i == len(parts)-1
		if !chosen[i].inPlace || cp.Number != int32(i+1) || !last && chosen[i].size != stride {
			return 0, false, nil
		}
	}
	for n, ps := range stored {
		for _, sp := range ps {
			if sp.inPlace && int(n) > len(parts) {
				return 0, false, nil
			}
		}
	}
	size := int64(len(parts)-1)*stride + chosen[len(parts)-1].size
	f, err := os.OpenFile(filepath.Join(dir, uploadData), os.O_RDWR, 0)
	if err != nil {
		return 0, false, err
	}
	err = f.Truncate(size)
	if err == nil && !d.noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, false, err
	}
	if err := os.Link(filepath.Join(dir, uploadData), target); err != nil {
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EMLINK) {
			return 0, false, nil // another file system under the root, or no hard links: copy
		}
		return 0, false, err
	}
	return size, true, nil
}

// concat copies the chosen parts, in order, into a new data file at target.
func (d *Store) concat(ctx context.Context, dir string, parts []staging.CompletedPart, chosen []dirPart, target string) (int64, error) {
	stride, err := setStride(dir, 0)
	if err != nil {
		return 0, err
	}
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return 0, err
	}
	var size int64
	for i, cp := range parts {
		if err = ctx.Err(); err != nil {
			break
		}
		sp := chosen[i]
		name, off := partName(cp.Number, sp.id), int64(0)
		if sp.inPlace {
			name, off = uploadData, int64(cp.Number-1)*stride
		}
		var in *os.File
		if in, err = os.Open(filepath.Join(dir, name)); err != nil {
			break
		}
		var n int64
		if _, err = in.Seek(off, io.SeekStart); err == nil {
			// copy_file_range(2) where the file system has it.
			n, err = io.Copy(out, io.LimitReader(in, sp.size))
		}
		in.Close()
		size += n
		if err == nil && n != sp.size {
			err = fmt.Errorf("part %d: %d of %d bytes: %w", cp.Number, n, sp.size, ErrCorrupt)
		}
		if err != nil {
			break
		}
	}
	if err == nil && !d.noSync {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(target)
		return 0, err
	}
	return size, nil
}

func (d *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := staging.CheckWrite(ctx, "abort multipart upload", key, nil); err != nil {
		return err
	}
	_, release, err := d.openUpload(key, uploadID)
	if err != nil {
		return fmt.Errorf("abort multipart upload: %w", err)
	}
	defer release()
	if err := os.RemoveAll(d.uploadDir(uploadID)); err != nil {
		return fmt.Errorf("abort multipart upload %s of %s: %w", uploadID, key, err)
	}
	return nil
}

func (d *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	if err := staging.CheckPrefix(ctx, "list multipart uploads", prefix); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(d.sys, "uploads"))
	if err != nil {
		return nil, fmt.Errorf("list multipart uploads %s: %w", prefix, err)
	}
	var out []staging.Upload
	for _, e := range ents {
		if !isID(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d.uploadDir(e.Name()), uploadRecord))
		if errors.Is(err, fs.ErrNotExist) {
			continue // being created or removed
		}
		if err != nil {
			return nil, fmt.Errorf("list multipart uploads %s: %w", prefix, err)
		}
		u, err := parseUpload(b)
		if err != nil {
			return nil, fmt.Errorf("list multipart uploads: upload %s: %w", e.Name(), err)
		}
		if strings.HasPrefix(u.Key, prefix) {
			out = append(out, staging.Upload{Key: u.Key, UploadID: e.Name(), Initiated: u.Initiated})
		}
	}
	staging.SortUploads(out)
	return out, nil
}
