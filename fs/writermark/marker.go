package writermark

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

const (
	// DefaultTTL is how long a writer marker lives unrenewed.
	DefaultTTL = 3 * time.Minute
	// MaxTTL bounds the TTL a marker may claim.
	MaxTTL = 24 * time.Hour
	// Recheck is how long the cleaner acts on markers it read before it
	// reads them again.
	Recheck = 10 * time.Second
	// MaxBytes bounds a marker read from the store.
	MaxBytes = 1024

	// These constants are part of the format (see the package doc).
	version      = 1
	maxHostBytes = 255
)

// ErrBad: a writer marker that does not decode.
var ErrBad = errors.New("bad writer marker")

// Marker is the body of a writer marker.
type Marker struct {
	Lo   uint64
	TTL  time.Duration
	Host string
	PID  int
}

type markerJSON struct {
	V     int    `json:"v"`
	Lo    uint64 `json:"lo"`
	TTLms int64  `json:"ttl_ms"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// Encode encodes m (see the layout in the package doc).
func Encode(m Marker) []byte {
	b, _ := json.Marshal(markerJSON{V: version, Lo: m.Lo, TTLms: m.TTL.Milliseconds(),
		Host: m.Host, PID: m.PID})
	return b
}

// Decode decodes and checks a marker read from the store.
func Decode(b []byte) (Marker, error) {
	if len(b) > MaxBytes {
		return Marker{}, fmt.Errorf("%w: %d bytes, over %d", ErrBad, len(b), MaxBytes)
	}
	var j markerJSON
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&j); err != nil {
		return Marker{}, fmt.Errorf("%w: %v", ErrBad, err)
	}
	if d.More() {
		return Marker{}, fmt.Errorf("%w: data after the object", ErrBad)
	}
	switch {
	case j.V != version:
		return Marker{}, fmt.Errorf("%w: version %d, want %d", ErrBad, j.V, version)
	case j.Lo == 0:
		return Marker{}, fmt.Errorf("%w: lo 0", ErrBad)
	case j.TTLms < 1000 || j.TTLms > MaxTTL.Milliseconds():
		return Marker{}, fmt.Errorf("%w: ttl %d ms, want 1000..%d", ErrBad, j.TTLms, MaxTTL.Milliseconds())
	case len(j.Host) > maxHostBytes:
		return Marker{}, fmt.Errorf("%w: host name of %d bytes", ErrBad, len(j.Host))
	}
	return Marker{Lo: j.Lo, TTL: time.Duration(j.TTLms) * time.Millisecond, Host: j.Host, PID: j.PID}, nil
}

// Stored is a writer marker as found in the store.
type Stored struct {
	Key string
	// Modified is the store's LastModified of the marker.
	Modified time.Time
	Size     int64
	Marker   Marker
	// Err says why the body did not decode; such a marker is taken to
	// protect every object of its file for MaxTTL.
	Err error
}

// Live says whether the marker is within its TTL at now.
func (w Stored) Live(now time.Time) bool {
	ttl := w.Marker.TTL
	if w.Err != nil {
		ttl = MaxTTL
	}
	return now.Sub(w.Modified) <= ttl
}

// Covers says whether a live marker protects objects of checkpoint cno.
func (w Stored) Covers(cno uint64) bool { return w.Err != nil || cno >= w.Marker.Lo }

// ReadAll lists and reads the writer markers of the file at prefix.
func ReadAll(ctx context.Context, st staging.Store, prefix string) ([]Stored, error) {
	objs, err := staging.ListAll(ctx, st, prefix+volume.WritersDir)
	if err != nil {
		return nil, fmt.Errorf("list writer markers of %s: %w", prefix, err)
	}
	out := make([]Stored, 0, len(objs))
	for _, o := range objs {
		w, err := Read(ctx, st, o.Key)
		if errors.Is(err, staging.ErrNotFound) {
			continue // let go since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// Read reads one writer marker (at most MaxBytes of it). A body that does
// not decode is reported in Stored.Err, not as an error.
func Read(ctx context.Context, st staging.Store, key string) (Stored, error) {
	b, info, err := st.Get(ctx, key, staging.Bytes(0, MaxBytes+1))
	if errors.Is(err, staging.ErrInvalidRange) {
		b = nil // an empty object: its info from HEAD
		info, err = st.Head(ctx, key)
	}
	if err != nil {
		return Stored{}, fmt.Errorf("read writer marker %s: %w", key, err)
	}
	w := Stored{Key: key, Modified: info.LastModified, Size: info.Size}
	if info.Size > MaxBytes {
		w.Err = fmt.Errorf("%w: %d bytes, over %d", ErrBad, info.Size, MaxBytes)
		return w, nil
	}
	w.Marker, w.Err = Decode(b)
	return w, nil
}
