package test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ckvolume "github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// headDelayStore holds back the first head of a new file written through it
// (a create's If-None-Match put of "…/inode") while armed.
type headDelayStore struct {
	staging.Store
	armed atomic.Bool
	delay time.Duration
}

func (s *headDelayStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	if opts.IfNoneMatch && strings.HasSuffix(key, "/"+ckvolume.HeadName) && s.armed.CompareAndSwap(true, false) {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return staging.ObjectInfo{}, ctx.Err()
		}
	}
	return s.Store.Put(ctx, key, data, opts)
}

// TestCreateOpenedOnAnotherMountOfAnotherFormat: mount A (Stream) creates a
// file; before its head lands, mount B (Parted) opens the name; once it has
// landed B writes and fsyncs, then A writes another range and fsyncs. Both
// writes must be stored: one file, one format, whichever mount fixed it. B
// once made its file in its own format with no head, and its fsync could
// not build on the head A stored meanwhile, of the other format (EIO, every
// time).
func TestCreateOpenedOnAnotherMountOfAnotherFormat(t *testing.T) {
	v := newVolume(t)
	delay := &headDelayStore{delay: 1500 * time.Millisecond}
	a := v.mountWrapped("format=stream,ns_refresh=50ms", func(st staging.Store) staging.Store {
		delay.Store = st
		return delay
	})
	b := v.mount("format=parted,ns_refresh=50ms")

	delay.armed.Store(true)
	created := make(chan error, 1)
	var fa *os.File
	go func() {
		var err error
		fa, err = os.OpenFile(a.path("f"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		created <- err
	}()
	var fb *os.File
	waitFor(t, 10*time.Second, func() error {
		var err error
		fb, err = os.OpenFile(b.path("f"), os.O_RDWR, 0)
		return err
	})
	defer fb.Close()
	// A's head lands (its create returns) after B made its file.
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the create on A did not return")
	}
	fromB := bytes.Repeat([]byte("b"), 300<<10)
	if _, err := fb.WriteAt(fromB, 0); err != nil {
		t.Fatal(err)
	}
	if err := fb.Sync(); err != nil {
		t.Fatalf("fsync on B, which opened the file before its head landed: %v", err)
	}
	defer fa.Close()
	fromA := bytes.Repeat([]byte("a"), 100<<10)
	if _, err := fa.WriteAt(fromA, 400<<10); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatalf("fsync on A: %v", err)
	}
	if err := fb.Close(); err != nil {
		t.Fatalf("close on B: %v", err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("close on A: %v", err)
	}
	want := make([]byte, 500<<10)
	copy(want, fromB)
	copy(want[400<<10:], fromA)
	c := v.mount("")
	got, err := os.ReadFile(c.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("a fresh mount reads %d bytes (first difference at %d), want both writes: %d", len(got), commonLen(got, want), len(want))
	}
}
