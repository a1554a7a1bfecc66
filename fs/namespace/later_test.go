package namespace

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// gatedLog holds every Put of a log entry until gate is closed.
type gatedLog struct {
	staging.Store
	gate chan struct{}
}

func (s *gatedLog) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if _, ok := parseSeq(key, prefix(testRoot)+logDir); ok {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return staging.ObjectInfo{}, ctx.Err()
		}
	}
	return s.Store.Put(ctx, key, data, opts)
}

func TestSetAttrLaterShownAtOnceLandsInOrder(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	a := openNS(t, mem, Options{})
	f, err := a.Create(ctx, RootIno, "f", 0o600, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	gated := &gatedLog{Store: mem, gate: make(chan struct{})}
	a.store = gated

	// tar -x: futimens, fchown, fchmod on the open file, none waiting for
	// the store (the log Put is held).
	mt := time.Unix(1_600_000_000, 0)
	var ws []*Pending
	for _, sa := range []SetAttr{{Mtime: &mt}, {Uid: u32(7), Gid: u32(8)}, {Mode: u32(0o644)}} {
		n, w, err := a.SetAttrLater(f.Ino, sa)
		if err != nil {
			t.Fatalf("SetAttrLater(%+v): %v", sa, err)
		}
		ws = append(ws, w)
		_ = n
	}
	n, err := a.GetNode(context.Background(), f.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode != 0o644 || n.Uid != 7 || n.Gid != 8 || n.MtimeNs != mt.UnixNano() {
		t.Fatalf("before landing, GetNode = mode %o uid %d gid %d mtime %d; want the changes shown", n.Mode, n.Uid, n.Gid, n.MtimeNs)
	}
	if l, _ := a.Lookup(context.Background(), RootIno, "f"); l.Mode != 0o644 {
		t.Fatalf("before landing, Lookup shows mode %o, want 0644", l.Mode)
	}
	for _, w := range ws {
		select {
		case <-w.Done():
			t.Fatal("a change landed while the log was held")
		default:
		}
	}
	// A change that waits, made after them, lands after them.
	renamed := make(chan error, 1)
	go func() {
		_, err := a.Rename(ctx, RootIno, "f", RootIno, "g", 0)
		renamed <- err
	}()
	close(gated.gate)
	for i, w := range ws {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if err := <-renamed; err != nil {
		t.Fatal(err)
	}

	// Another mount reads the same, from the log.
	b := openNS(t, mem, Options{})
	nb, err := b.Lookup(context.Background(), RootIno, "g")
	if err != nil {
		t.Fatal(err)
	}
	if nb.Mode != 0o644 || nb.Uid != 7 || nb.Gid != 8 || nb.MtimeNs != mt.UnixNano() {
		t.Fatalf("another mount sees mode %o uid %d gid %d mtime %d", nb.Mode, nb.Uid, nb.Gid, nb.MtimeNs)
	}
	if dump(t, a) != dump(t, b) {
		t.Fatal("the two mounts differ")
	}
	a.mu.RLock()
	left := len(a.shown)
	a.mu.RUnlock()
	if left != 0 {
		t.Fatalf("%d nodes still shown after landing", left)
	}
	var kinds []string
	for _, e := range logEntries(t, mem) {
		for _, o := range e.ops() {
			kinds = append(kinds, o.Kind)
		}
	}
	want := []string{opCreate, opSetAttr, opSetAttr, opSetAttr, opRename}
	if len(kinds) != len(want) {
		t.Fatalf("log ops %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("log ops %v, want %v", kinds, want)
		}
	}
}

func TestSetAttrLaterFailureReportedAndUnshown(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	fl := &flakyStore{Store: mem}
	a := openNS(t, fl, Options{PutAttempts: 2})
	f, err := a.Create(ctx, RootIno, "f", 0o600, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	fl.mu.Lock()
	fl.putFault = func(key string, n int) (bool, error) { return false, errLink }
	fl.mu.Unlock()
	_, w, err := a.SetAttrLater(f.Ino, SetAttr{Mode: u32(0o640)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); !errors.Is(err, errLink) {
		t.Fatalf("Wait = %v, want the store's error", err)
	}
	n, _ := a.GetNode(context.Background(), f.Ino)
	if n.Mode != 0o600 {
		t.Fatalf("after the change failed, mode %o is shown, want 0600", n.Mode)
	}

	// Refused at once when it cannot apply.
	if _, _, err := a.SetAttrLater(f.Ino+1, SetAttr{Mode: u32(0o640)}); !errors.Is(err, ErrNotExist) {
		t.Fatalf("SetAttrLater of a missing node = %v, want ErrNotExist", err)
	}
}

func TestSetAttrLaterOfNodeRemovedMeanwhile(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	a := openNS(t, mem, Options{})
	b := openNS(t, mem, Options{})
	f, err := a.Create(ctx, RootIno, "f", 0o600, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// b removes the name (the node stays an orphan), then the node is
	// forgotten: a's change, checked on a's state, is refused by the log's.
	if _, err := b.Unlink(ctx, RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if err := b.Forget(ctx, f.FileID); err != nil {
		t.Fatal(err)
	}
	_, w, err := a.SetAttrLater(f.Ino, SetAttr{Mode: u32(0o640)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); !errors.Is(err, ErrNotExist) {
		t.Fatalf("Wait = %v, want ErrNotExist", err)
	}
	if dump(t, a) != dump(t, b) {
		t.Fatal("the two mounts differ")
	}
}

// The changes a program makes one after another on an open file wait for
// company: the three of tar go in one entry, sent at Kick (the close).
func TestSetAttrLaterShareOneEntry(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	a := openNS(t, mem, Options{})
	f, err := a.Create(ctx, RootIno, "f", 0o600, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1_600_000_000, 0)
	var ws []*Pending
	for _, sa := range []SetAttr{{Mtime: &mt}, {Uid: u32(7), Gid: u32(8)}, {Mode: u32(0o644)}} {
		_, w, err := a.SetAttrLater(f.Ino, sa)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	a.Kick()
	for _, w := range ws {
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	es := logEntries(t, mem)
	if len(es) != 2 || len(es[1].ops()) != 3 {
		var n []int
		for _, e := range es {
			n = append(n, len(e.ops()))
		}
		t.Fatalf("entries hold %v ops, want [1 3]: the create, then the three changes in one", n)
	}
	// Nothing kicks: it goes by itself, laterDelay after it was made.
	_, w, err := a.SetAttrLater(f.Ino, SetAttr{Mode: u32(0o600)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a change made with SetAttrLater and never waited for did not land")
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
