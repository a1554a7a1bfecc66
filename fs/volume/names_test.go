package volume

import (
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/namespace"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// TestOpenNames: the namespace OpenNames opens is the one the descriptor
// names, and its names land where that namespace keeps them: ns/ for v1,
// ns2/ for v2, never the other.
func TestOpenNames(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		ns         config.Namespace
		under, not string
	}{
		{config.NamespaceV1, "vol/" + NamespaceDir, "vol/ns2/"},
		{config.NamespaceV2, "vol/ns2/", "vol/" + NamespaceDir},
	} {
		t.Run(c.ns.String(), func(t *testing.T) {
			st := mem.New()
			cfg := config.MountDefault(1 << 30)
			cfg.Namespace = c.ns
			d, err := CreateDescriptor(ctx, st, "vol/", cfg)
			if err != nil {
				t.Fatal(err)
			}
			names, err := OpenNames(ctx, st, "vol/", d, NamesOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer names.Close()
			if _, isTree := names.(*nsv2.Tree); isTree != (c.ns == config.NamespaceV2) {
				t.Fatalf("namespace %v opened as %T", c.ns, names)
			}
			if _, err := names.Create(ctx, namespace.RootIno, "f", 0o644, namespace.Owner{}); err != nil {
				t.Fatal(err)
			}
			if n, err := names.Lookup(ctx, namespace.RootIno, "f"); err != nil || n.Kind != namespace.KindFile {
				t.Fatalf("lookup of the name made: %+v, %v", n, err)
			}
			objs, err := staging.ListAll(ctx, st, "vol/")
			if err != nil {
				t.Fatal(err)
			}
			var in int
			for _, o := range objs {
				if strings.HasPrefix(o.Key, c.not) {
					t.Errorf("namespace %v wrote %s", c.ns, o.Key)
				}
				if strings.HasPrefix(o.Key, c.under) {
					in++
				}
			}
			if in == 0 {
				t.Fatalf("namespace %v wrote nothing under %s: %v", c.ns, c.under, objs)
			}
		})
	}
}
