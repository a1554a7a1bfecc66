package volume

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

func TestParseDescriptor(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want error
	}{
		{"current", `{"layout_version":1,"format":"stream","data_block_size":65536,"meta_block_size":4096}`, nil},
		{"parted", `{"layout_version":1,"format":"parted"}`, nil},
		{"newer", `{"layout_version":2,"format":"stream"}`, ErrNewerLayout},
		{"zero version", `{"format":"stream"}`, ErrBadDescriptor},
		{"bad format", `{"layout_version":1,"format":"zip"}`, ErrBadDescriptor},
		{"not json", `layout_version=1`, ErrBadDescriptor},
		{"empty", ``, ErrBadDescriptor},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseDescriptor(DescriptorKey, []byte(c.in))
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("parseDescriptor(%s) = %v, want %v", c.in, err, c.want)
			}
		})
	}
}

func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte(`{"layout_version":1,"format":"stream","data_block_size":65536,"meta_block_size":4096}`))
	f.Add([]byte(`{"layout_version":99}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseDescriptor("k", b)
		if err != nil {
			if !errors.Is(err, ErrBadDescriptor) && !errors.Is(err, ErrNewerLayout) {
				t.Fatalf("error of an unknown class: %v", err)
			}
			return
		}
		if v.LayoutVersion < 1 || v.LayoutVersion > LayoutVersion {
			t.Fatalf("accepted layout version %d", v.LayoutVersion)
		}
	})
}

// TestOpenDescriptor: the descriptor is created once and concurrent
// creators agree on it.
func TestOpenDescriptor(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	var wg sync.WaitGroup
	vols := make([]Descriptor, 8)
	errs := make([]error, 8)
	for i := range vols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			if i%2 == 1 {
				c.Format = segment.FormatParted
			}
			vols[i], errs[i] = OpenDescriptor(ctx, st, "vol/", c, false)
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
	if objs, err := staging.ListAll(ctx, st, ""); err != nil || len(objs) != 1 || objs[0].Key != "vol/"+DescriptorKey {
		t.Fatalf("the volume holds %v (%v), want its descriptor only", objs, err)
	}
}

// TestRequireDescriptor: required, a root without a descriptor is
// ErrNoVolume and nothing is written; CreateDescriptor writes one once, with
// the configuration's format, and refuses a second time.
func TestRequireDescriptor(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	cfg := config.MountDefault(1 << 30)
	cfg.Format = segment.FormatParted
	_, err := OpenDescriptor(ctx, st, "tpyo/", cfg, true)
	if !errors.Is(err, ErrNoVolume) || !errors.Is(err, staging.ErrNotFound) {
		t.Fatalf("open of an empty root, required: %v, want ErrNoVolume", err)
	}
	if objs, err := staging.ListAll(ctx, st, ""); err != nil || len(objs) != 0 {
		t.Fatalf("a refused open wrote %d objects (%v)", len(objs), err)
	}
	if _, err := ReadDescriptor(ctx, st, "tpyo/"); !errors.Is(err, ErrNoVolume) {
		t.Fatalf("ReadDescriptor of an empty root: %v, want ErrNoVolume", err)
	}
	v, err := CreateDescriptor(ctx, st, "tpyo/", cfg)
	if err != nil || v.Format != "parted" || v.DataBlockSize != cfg.DataBlockSize {
		t.Fatalf("CreateDescriptor = %+v, %v", v, err)
	}
	cfg2 := cfg
	cfg2.Format = segment.FormatStream
	if _, err := CreateDescriptor(ctx, st, "tpyo/", cfg2); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreateDescriptor: %v, want ErrExists", err)
	}
	for _, require := range []bool{false, true} {
		if got, err := OpenDescriptor(ctx, st, "tpyo/", cfg2, require); err != nil || got != v {
			t.Fatalf("OpenDescriptor(require %v) after a refused second create = %+v, %v; want %+v", require, got, err, v)
		}
	}
}

// A volume descriptor larger than any descriptor is refused with
// ErrTooLarge naming its key, without reading it whole.
func TestOpenDescriptorOversized(t *testing.T) {
	mem := mem.New()
	key := "vol/" + DescriptorKey
	if _, err := mem.Put(context.Background(), key, bytes.Repeat([]byte{' '}, maxDescriptorBytes+1), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := OpenDescriptor(context.Background(), mem, "vol/", config.Default(), false)
	if !errors.Is(err, staging.ErrTooLarge) || !strings.Contains(err.Error(), key) {
		t.Fatalf("open over an oversized descriptor: %v, want ErrTooLarge naming %s", err, key)
	}
}
