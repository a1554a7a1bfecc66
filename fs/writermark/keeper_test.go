package writermark

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckptfs/ckptfs/fs/engine/fakeclock"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A Keeper stores one marker, under the file's writers/, naming the lowest
// checkpoint it holds; holding more of a live marker's range sends nothing;
// Close deletes it, and a Hold after Close is refused.
func TestKeeperHoldAndClose(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	var requests atomic.Int64
	k := NewKeeper(st, "f/a/", fakeclock.New(), nil, &requests)
	if err := k.Hold(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := k.Hold(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests for two holds of a live marker; want 1", n)
	}
	ws, err := ReadAll(ctx, st, "f/a/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Err != nil || ws[0].Marker.Lo != 3 || ws[0].Marker.TTL != DefaultTTL {
		t.Fatalf("markers %+v; want one with lo 3 and the default TTL", ws)
	}
	if !strings.HasPrefix(ws[0].Key, volume.WriterKey("f/a/", "")) || !volume.IsWriterKey(strings.TrimPrefix(ws[0].Key, "f/a/")) {
		t.Errorf("marker key %q is no writer marker's of f/a/", ws[0].Key)
	}
	k.Close()
	if _, err := st.Head(ctx, ws[0].Key); !errors.Is(err, staging.ErrNotFound) {
		t.Errorf("marker after Close: %v; want it deleted", err)
	}
	if err := k.Hold(ctx, 6); !errors.Is(err, ErrClosed) {
		t.Errorf("Hold after Close: %v; want ErrClosed", err)
	}
}

// A marker that does not decode protects its file's every checkpoint for
// MaxTTL; one that does, its range for its TTL.
func TestStoredLiveAndCovers(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	for key, body := range map[string][]byte{
		"f/a/writers/good": Encode(Marker{Lo: 4, TTL: DefaultTTL}),
		"f/a/writers/bad":  []byte("{"),
	} {
		if _, err := st.Put(ctx, key, body, staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := ReadAll(ctx, st, "f/a/")
	if err != nil || len(ws) != 2 {
		t.Fatalf("ReadAll: %v, %v", ws, err)
	}
	for _, w := range ws {
		bad := strings.HasSuffix(w.Key, "/bad")
		if bad != (w.Err != nil) || bad && !errors.Is(w.Err, ErrBad) {
			t.Errorf("%s: Err %v", w.Key, w.Err)
		}
		later := w.Modified.Add(DefaultTTL + 1)
		if w.Live(later) != bad {
			t.Errorf("%s: live past the default TTL = %v", w.Key, w.Live(later))
		}
		if w.Live(w.Modified.Add(MaxTTL + 1)) {
			t.Errorf("%s: live past MaxTTL", w.Key)
		}
		if w.Covers(3) != bad || !w.Covers(4) {
			t.Errorf("%s: covers 3 %v, 4 %v", w.Key, w.Covers(3), w.Covers(4))
		}
	}
}
