package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
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
			mem := staging.NewMem()
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
	if errors.Is(err, staging.ErrInjected) {
		return s.Store.Put(ctx, key, data, o)
	}
	return info, err
}

// The check's first create landing with its answer lost, then refused when
// retried, is no reason to refuse the mount (the key is random: only that
// very create can have made it); nor is a delete of the probe that fails.
func TestProbeLostAnswerAndFailedDelete(t *testing.T) {
	ctx := context.Background()
	mem := staging.NewMem()
	faults := staging.NewFaults(mem, 1)
	faults.Add(staging.Rule{Op: staging.OpPut, Nth: 1, Kind: staging.FaultLostAnswer})
	if err := probeConditions(ctx, retrying{faults}, "vol/"); err != nil {
		t.Fatalf("probe with the first answer lost: %v", err)
	}
	if objs, _ := staging.ListAll(ctx, mem, ""); len(objs) != 0 {
		t.Fatalf("the probe left %v", objs)
	}
	faults.Add(staging.Rule{Op: staging.OpDelete, Kind: staging.FaultError})
	if err := probeConditions(ctx, retrying{faults}, "vol/"); err != nil {
		t.Fatalf("probe whose delete failed: %v", err)
	}
}
