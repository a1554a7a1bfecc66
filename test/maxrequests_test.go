package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestMountOptsMaxRequests: a mount capped at one request in flight
// (max_threads=1, the tightest max_requests) still writes several files at
// once, each larger than a multipart piece, and reads them back: every
// request of every file waits its turn, none waits on another forever.
func TestMountOptsMaxRequests(t *testing.T) {
	need(t, "fusermount3")
	store := "file://" + t.TempDir()
	dir := mountpoint(t)
	startForeground(t, store, dir, "create,max_threads=1,segment_mpu_chunk_size=5M,stream_segment_bytes=10M")
	t.Cleanup(func() { runErr("", "fusermount3", "-u", dir) })
	const files, size = 4, 12 << 20
	want := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
			if err == nil {
				_, err = f.Write(want(i))
				if err == nil {
					err = f.Sync()
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range files {
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil || !bytes.Equal(got, want(i)) {
			t.Fatalf("file %d: %d bytes, %v; want %d bytes of %c", i, len(got), err, size, 'a'+i)
		}
	}
}
