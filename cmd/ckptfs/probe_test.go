package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/faulty"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func nopLog() *zap.Logger { return zap.NewNop() }

// ignoring is a store that drops the conditions of every write, as some
// S3-compatible servers do.
type ignoring struct {
	staging.Store
	drop func(staging.Conditions) bool
}

func (s ignoring) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	if s.drop(o.Conditions) {
		o.Conditions = staging.Conditions{}
	}
	return s.Store.Put(ctx, key, data, o)
}

func TestProbeConditions(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		drop func(staging.Conditions) bool
		want error
	}{
		{"honours both", func(staging.Conditions) bool { return false }, nil},
		{"ignores If-None-Match", func(c staging.Conditions) bool { return c.IfNoneMatch }, errNoConditions},
		{"ignores If-Match", func(c staging.Conditions) bool { return c.IfMatch != "" }, errNoConditions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := mem.New()
			err := probeConditions(ctx, ignoring{mem, c.drop}, "vol/")
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("probeConditions = %v, want %v", err, c.want)
			}
			if objs, _ := staging.ListAll(ctx, mem, ""); len(objs) != 0 {
				t.Fatalf("the probe left %v", objs)
			}
		})
	}
}

// TestMountRefusesIgnoredConditions: a store that ignores If-None-Match is
// refused, unless single_writer, which mounts and warns.
func TestMountRefusesIgnoredConditions(t *testing.T) {
	cfg := config.MountDefault(config.TotalRAM())
	wrap := func(st staging.Store) staging.Store {
		return ignoring{st, func(c staging.Conditions) bool { return c.IfNoneMatch }}
	}
	store := "file://" + t.TempDir()
	_, err := openFSWrapped(store, storeOpts{create: true}, cfg, nopLog(), func(string) {}, wrap)
	if !errors.Is(err, errNoConditions) || !strings.Contains(err.Error(), "mount with -o single_writer") {
		t.Fatalf("mount of a store ignoring conditions: %v", err)
	}
	var warned []string
	fsys, err := openFSWrapped(store, storeOpts{create: true, singleWriter: true}, cfg, nopLog(), func(s string) { warned = append(warned, s) }, wrap)
	if err != nil {
		t.Fatalf("single_writer mount: %v", err)
	}
	fsys.Close()
	if len(warned) != 1 || !strings.Contains(warned[0], "would corrupt it") {
		t.Fatalf("single_writer warnings %q", warned)
	}
}

// retrying retries a Put whose answer was lost, as the SDK's retryer does.
type retrying struct{ staging.Store }

func (s retrying) Put(ctx context.Context, key string, data []byte, o staging.PutOptions) (staging.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, data, o)
	if errors.Is(err, faulty.ErrInjected) {
		return s.Store.Put(ctx, key, data, o)
	}
	return info, err
}

// The check's first create landing with its answer lost, then refused when
// retried, is no reason to refuse the mount (the key is random: only that
// very create can have made it); nor is a delete of the probe that fails.
func TestProbeLostAnswerAndFailedDelete(t *testing.T) {
	ctx := context.Background()
	mem := mem.New()
	faults := faulty.New(mem, 1)
	faults.Add(faulty.Rule{Op: staging.OpPut, Nth: 1, Kind: faulty.LostAnswer})
	if err := probeConditions(ctx, retrying{faults}, "vol/"); err != nil {
		t.Fatalf("probe with the first answer lost: %v", err)
	}
	if objs, _ := staging.ListAll(ctx, mem, ""); len(objs) != 0 {
		t.Fatalf("the probe left %v", objs)
	}
	faults.Add(faulty.Rule{Op: staging.OpDelete, Kind: faulty.Error})
	if err := probeConditions(ctx, retrying{faults}, "vol/"); err != nil {
		t.Fatalf("probe whose delete failed: %v", err)
	}
}

// writeRecorder fails and records every request that would change the
// store, as read-only credentials refuse them.
type writeRecorder struct {
	staging.Store
	mu     sync.Mutex
	writes []string
}

func (w *writeRecorder) refuse(op, key string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, op+" "+key)
	return fmt.Errorf("%s %s: access denied (read-only credentials)", op, key)
}

func (w *writeRecorder) recorded() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

func (w *writeRecorder) Put(_ context.Context, key string, _ []byte, _ staging.PutOptions) (staging.ObjectInfo, error) {
	return staging.ObjectInfo{}, w.refuse("put", key)
}

func (w *writeRecorder) Delete(_ context.Context, key string) error { return w.refuse("delete", key) }

func (w *writeRecorder) CreateMultipart(_ context.Context, key string, _ staging.PutOptions) (string, error) {
	return "", w.refuse("create multipart", key)
}

func (w *writeRecorder) UploadPart(_ context.Context, key, _ string, _ int32, _ []byte) (string, error) {
	return "", w.refuse("upload part", key)
}

func (w *writeRecorder) CompleteMultipart(_ context.Context, key, _ string, _ []staging.CompletedPart, _ staging.Conditions) (staging.ObjectInfo, error) {
	return staging.ObjectInfo{}, w.refuse("complete multipart", key)
}

func (w *writeRecorder) AbortMultipart(_ context.Context, key, _ string) error {
	return w.refuse("abort multipart", key)
}

// TestReadOnlyOpenWritesNothing: a read-only mount of a volume opens it
// and its namespace without one write request (no conditional-write
// check); ro with create is refused before the store is opened, and ro on
// a store without a volume says that a read-only mount creates none.
func TestReadOnlyOpenWritesNothing(t *testing.T) {
	store := "file://" + t.TempDir()
	cfg := config.MountDefault(config.TotalRAM())
	fsys, err := openFS(store, storeOpts{create: true}, cfg, nopLog(), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	fsys.Close()

	ro := cfg
	ro.ReadOnly = true
	var rec *writeRecorder
	wrap := func(st staging.Store) staging.Store { rec = &writeRecorder{Store: st}; return rec }
	fsys, err = openFSWrapped(store, storeOpts{}, ro, nopLog(), func(string) {}, wrap)
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	fsys.Close()
	if w := rec.recorded(); len(w) != 0 {
		t.Fatalf("a read-only open sent write requests: %q", w)
	}

	_, err = openFSWrapped(store, storeOpts{create: true}, ro, nopLog(), func(string) {}, wrap)
	if err == nil || !strings.Contains(err.Error(), "-o ro with -o create") {
		t.Fatalf("ro with create: %v, want a refusal saying so", err)
	}
	_, err = openFSWrapped("file://"+t.TempDir(), storeOpts{}, ro, nopLog(), func(string) {}, wrap)
	if err == nil || !strings.Contains(err.Error(), "a read-only mount creates none") {
		t.Fatalf("ro without a volume: %v", err)
	}
	if w := rec.recorded(); len(w) != 0 {
		t.Fatalf("read-only opens sent write requests: %q", w)
	}
}
