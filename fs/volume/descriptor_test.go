package volume

import (
	"bytes"
	"context"
	"encoding/json"
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
		{"newer", `{"layout_version":3,"format":"stream","namespace":"v2"}`, ErrNewerLayout},
		{"v1 named", `{"layout_version":1,"format":"stream","namespace":"v1"}`, nil},
		{"v2", `{"layout_version":2,"format":"stream","data_block_size":65536,"meta_block_size":4096,"namespace":"v2"}`, nil},
		// A layout 1 descriptor naming v2 would be mounted as v1 by the
		// builds before v2, which ignore the field.
		{"v2 in layout 1", `{"layout_version":1,"format":"stream","namespace":"v2"}`, ErrBadDescriptor},
		{"layout 2 without namespace", `{"layout_version":2,"format":"stream"}`, ErrBadDescriptor},
		{"layout 2 of v1", `{"layout_version":2,"format":"stream","namespace":"v1"}`, ErrBadDescriptor},
		{"unknown namespace", `{"layout_version":2,"format":"stream","namespace":"v3"}`, ErrBadDescriptor},
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
	f.Add([]byte(`{"layout_version":2,"format":"parted","namespace":"v2"}`))
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
		if (v.LayoutVersion == layoutV2) != (v.NamespaceVersion() == config.NamespaceV2) {
			t.Fatalf("accepted layout version %d with namespace %q", v.LayoutVersion, v.Namespace)
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

// TestDescriptorNamespace: format writes a v1 volume's descriptor as the
// builds before v2 wrote it (they mount it), and a v2 volume's with layout
// version 2, which a build that reads layout 1 only (every build before v2)
// refuses as newer, never mounts as an empty v1 namespace. The builds before
// v2 are this parser with newest 1: their check was this one.
func TestDescriptorNamespace(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	for _, c := range []struct {
		ns     config.Namespace
		layout int
		body   string
	}{
		{config.NamespaceV1, 1, `{"layout_version":1,"format":"stream","data_block_size":65536,"meta_block_size":4096}`},
		{config.NamespaceV2, 2, `{"layout_version":2,"format":"stream","data_block_size":65536,"meta_block_size":4096,"namespace":"v2"}`},
	} {
		t.Run(c.ns.String(), func(t *testing.T) {
			cfg := config.MountDefault(1 << 30)
			cfg.Namespace = c.ns
			root := c.ns.String() + "/"
			v, err := CreateDescriptor(ctx, st, root, cfg)
			if err != nil || v.LayoutVersion != c.layout || v.NamespaceVersion() != c.ns {
				t.Fatalf("CreateDescriptor = %+v, %v; want layout %d, namespace %v", v, err, c.layout, c.ns)
			}
			b, _, err := st.Get(ctx, root+DescriptorKey, staging.Range{})
			if err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, b); err != nil || compact.String() != c.body {
				t.Fatalf("descriptor written:\n%s\nwant\n%s", compact.String(), c.body)
			}
			if got, err := ReadDescriptor(ctx, st, root); err != nil || got != v {
				t.Fatalf("ReadDescriptor = %+v, %v; want %+v", got, err, v)
			}
			old, err := parseDescriptorUpTo(DescriptorKey, b, layoutV1)
			switch c.ns {
			case config.NamespaceV1:
				if err != nil || old != v {
					t.Fatalf("a build before v2 reads a v1 volume as %+v, %v; want %+v", old, err, v)
				}
			case config.NamespaceV2:
				if !errors.Is(err, ErrNewerLayout) || !strings.Contains(err.Error(), "layout version 2, this build reads up to 1") {
					t.Fatalf("a build before v2 reads a v2 volume: %+v, %v; want ErrNewerLayout", old, err)
				}
			}
		})
	}
	cfg := config.MountDefault(1 << 30)
	cfg.Namespace = 0
	if _, err := CreateDescriptor(ctx, st, "none/", cfg); err == nil {
		t.Fatal("CreateDescriptor of namespace 0 succeeded")
	}
}
