package fusefs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestParseVolume(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want error
	}{
		{"current", `{"layout_version":1,"format":"stream","data_block_size":65536,"meta_block_size":4096}`, nil},
		{"parted", `{"layout_version":1,"format":"parted"}`, nil},
		{"newer", `{"layout_version":2,"format":"stream"}`, ErrNewerLayout},
		{"zero version", `{"format":"stream"}`, ErrBadVolume},
		{"bad format", `{"layout_version":1,"format":"zip"}`, ErrBadVolume},
		{"not json", `layout_version=1`, ErrBadVolume},
		{"empty", ``, ErrBadVolume},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseVolume("ckptfs.json", []byte(c.in))
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("parseVolume(%s) = %v, want %v", c.in, err, c.want)
			}
		})
	}
}

func FuzzParseVolume(f *testing.F) {
	f.Add([]byte(`{"layout_version":1,"format":"stream","data_block_size":65536,"meta_block_size":4096}`))
	f.Add([]byte(`{"layout_version":99}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseVolume("k", b)
		if err != nil {
			if !errors.Is(err, ErrBadVolume) && !errors.Is(err, ErrNewerLayout) {
				t.Fatalf("error of an unknown class: %v", err)
			}
			return
		}
		if v.LayoutVersion < 1 || v.LayoutVersion > LayoutVersion {
			t.Fatalf("accepted layout version %d", v.LayoutVersion)
		}
	})
}

// TestOpenVolume: the descriptor is created once, concurrent creators agree,
// and a newer one is refused by New.
func TestOpenVolume(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	var wg sync.WaitGroup
	vols := make([]Volume, 8)
	errs := make([]error, 8)
	for i := range vols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			if i%2 == 1 {
				c.Format = segment.FormatParted
			}
			vols[i], errs[i] = openVolume(ctx, st, "vol/", c, false)
		}()
	}
	wg.Wait()
	for i := range vols {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if vols[i] != vols[0] {
			t.Fatalf("mount %d sees %+v, mount 0 %+v", i, vols[i], vols[0])
		}
	}
	if _, err := st.Put(ctx, "new/"+VolumeKey, []byte(`{"layout_version":7,"format":"stream"}`), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := New(ctx, st, Options{Config: cfg, Root: "new/"})
	if !errors.Is(err, ErrNewerLayout) {
		t.Fatalf("New on a newer volume: %v, want ErrNewerLayout", err)
	}
	if _, err := New(ctx, st, Options{Config: cfg, Root: "no-slash"}); err == nil {
		t.Fatal("New accepted a root without a trailing slash")
	}
}

// TestRequireVolume: with RequireVolume a root without a descriptor is
// ErrNoVolume and nothing is written; CreateVolume writes one once, with the
// configuration's format, and refuses a second time; New then opens it.
func TestRequireVolume(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	cfg.Format = segment.FormatParted
	_, err := New(ctx, st, Options{Config: cfg, Root: "tpyo/", RequireVolume: true})
	if !errors.Is(err, ErrNoVolume) || !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("New on an empty root with RequireVolume: %v, want ErrNoVolume", err)
	}
	if objs, err := staging.ListAll(ctx, st, ""); err != nil || len(objs) != 0 {
		t.Fatalf("a refused mount wrote %d objects (%v)", len(objs), err)
	}
	if _, err := ReadVolume(ctx, st, "tpyo/"); !errors.Is(err, ErrNoVolume) {
		t.Fatalf("ReadVolume of an empty root: %v, want ErrNoVolume", err)
	}
	v, err := CreateVolume(ctx, st, "tpyo/", cfg)
	if err != nil || v.Format != "parted" || v.DataBlockSize != cfg.DataBlockSize {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	cfg2 := cfg
	cfg2.Format = segment.FormatStream
	if _, err := CreateVolume(ctx, st, "tpyo/", cfg2); !errors.Is(err, ErrVolumeExists) {
		t.Fatalf("second CreateVolume: %v, want ErrVolumeExists", err)
	}
	if got, err := ReadVolume(ctx, st, "tpyo/"); err != nil || got != v {
		t.Fatalf("ReadVolume after a refused second create = %+v, %v; want %+v", got, err, v)
	}
	fsys, err := New(ctx, st, Options{Config: cfg, Root: "tpyo/", RequireVolume: true})
	if err != nil {
		t.Fatalf("New with RequireVolume on a created volume: %v", err)
	}
	fsys.Close()
}

func TestErrnoOf(t *testing.T) {
	fsys := &FS{log: zap.NewNop()}
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{namespace.ErrNotExist, syscall.ENOENT},
		{errors.Join(errors.New("context"), namespace.ErrExist), syscall.EEXIST},
		{namespace.ErrNotEmpty, syscall.ENOTEMPTY},
		{namespace.ErrNoAttr, syscall.ENODATA},
		{namespace.ErrNotSupported, syscall.ENOTSUP},
		{engine.ErrReadOnly, syscall.EROFS},
		{context.Canceled, syscall.EINTR},
		{&segment.CorruptError{Key: "k", Err: segment.ErrChecksum, Detail: "bad"}, syscall.EIO},
		{errors.New("network down"), syscall.EIO},
		{syscall.EXDEV, syscall.EXDEV},
	}
	for _, c := range cases {
		if got := fsys.errnoOf("op", c.err); got != c.want {
			t.Errorf("errnoOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestParams(t *testing.T) {
	c := config.MountDefault(4 << 30)
	c.FlushConflictPolicy = config.ConflictFailFast
	p := Params(c)
	if err := p.Validate(); err != nil {
		t.Fatalf("params of the mount defaults: %v", err)
	}
	if p.DirtyLimit != c.DirtyLimit() || p.DataBlockSize != int(c.DataBlockSize) ||
		p.StreamSegmentBytes != c.EffectiveStreamSegmentBytes() || p.ConflictPolicy != engine.ConflictFailFast {
		t.Fatalf("params %+v do not follow config %v", p, c)
	}
}
