package fusefs

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
)

// A metrics listener on every interface (":port") is reachable from other
// hosts: the mount says so in its log; one on loopback is not warned about.
func TestMetricsListenerWarnsWhenNotLoopback(t *testing.T) {
	cases := []struct {
		addr string
		warn bool
	}{
		{":0", true},
		{"0.0.0.0:0", true},
		{"127.0.0.1:0", false},
		{"localhost:0", false},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			cfg := config.MountDefault(1 << 30)
			cfg.Metrics = c.addr
			fsys, err := New(context.Background(), staging.NewMem(), Options{Config: cfg, Logger: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			defer fsys.Close()
			warned := logs.FilterMessageSnippet("metrics listener reachable from other hosts").Len() > 0
			if warned != c.warn {
				t.Fatalf("metrics=%s (listening on %s): warned %v, want %v", c.addr, fsys.MetricsAddr(), warned, c.warn)
			}
		})
	}
}
