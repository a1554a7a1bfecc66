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

// openUpload locks upload id of key and returns its record and the release
// of the lock; ErrNotFound if the upload is not open (or is another key's).
func (d *Store) openUpload(key, id string) (dirUpload, func(), error) {
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
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
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
	if p, ok := old[n]; ok {
		_ = os.Remove(filepath.Join(dir, partName(n, p.id)))
	}
	return `"` + partID + `"`, nil
}

func partName(n int32, id string) string { return fmt.Sprintf("%05d-%s", n, id) }

type dirPart struct {
	id   string
	size int64
}

// partFiles returns the parts stored in an upload folder by number.
func (d *Store) partFiles(dir string) (map[int32]dirPart, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	parts := make(map[int32]dirPart)
	for _, e := range ents {
		num, id, ok := strings.Cut(e.Name(), "-")
		if !ok || !isID(id) {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 32)
		if err != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		parts[int32(n)] = dirPart{id: id, size: info.Size()}
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

// complete concatenates the parts into a new data file and publishes it.
// Called with the upload locked.
func (d *Store) complete(ctx context.Context, p objPath, id string, u dirUpload, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	dir := d.uploadDir(id)
	stored, err := d.partFiles(dir)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	for i, cp := range parts {
		sp, ok := stored[cp.Number]
		switch {
		case !ok:
			return staging.ObjectInfo{}, fmt.Errorf("part %d was not uploaded", cp.Number)
		case `"`+sp.id+`"` != cp.ETag:
			return staging.ObjectInfo{}, fmt.Errorf("part %d has ETag \"%s\", not %s", cp.Number, sp.id, cp.ETag)
		case i < len(parts)-1 && sp.size < staging.MinPartSize:
			return staging.ObjectInfo{}, fmt.Errorf("part %d is %d bytes: %w", cp.Number, sp.size, staging.ErrPartTooSmall)
		}
	}
	dataID := newID()
	if err := d.mkdirs(p.dir); err != nil {
		return staging.ObjectInfo{}, err
	}
	tmp := filepath.Join(p.dir, p.dataName(dataID))
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return staging.ObjectInfo{}, err
	}
	var size int64
	for _, cp := range parts {
		if err = ctx.Err(); err != nil {
			break
		}
		var in *os.File
		in, err = os.Open(filepath.Join(dir, partName(cp.Number, stored[cp.Number].id)))
		if err != nil {
			break
		}
		var n int64
		n, err = io.Copy(out, in) // copy_file_range(2) where the file system has it
		in.Close()
		size += n
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
		os.Remove(tmp)
		return staging.ObjectInfo{}, err
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
