package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/wal"
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
			fsys, err := New(context.Background(), mem.New(), Options{Config: cfg, Logger: zap.New(core)})
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

// scrape is the mount's metrics in the text exposition format, parsed.
func scrape(t *testing.T, fsys *FS) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	var b bytes.Buffer
	if err := fsys.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, b.String())
	}
	return b.String(), mfs
}

// ckptfs_build_info names the build it is given, and every series, the
// mount's own and one registered later through MetricsRegisterer, carries
// the volume label: the URL without the keys its user information and
// query held.
func TestMetricsBuildInfoAndVolumeLabel(t *testing.T) {
	cfg := config.MountDefault(1 << 30)
	fsys, err := New(context.Background(), mem.New(), Options{Config: cfg, FsName: "s3://bucket/pre",
		VolumeURL: "s3://AKIDUSER:s3cr3tpass@bucket/pre/?endpoint=http://127.0.0.1:1&secret_key=qwertyzz#frag",
		Build:     BuildInfo{Version: "v1.2.3", Commit: "abc123-modified", Go: "go1.99"}})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "ckptfs_test_extra_total", Help: "A collector registered by someone else."})
	fsys.MetricsRegisterer().MustRegister(extra)
	text, mfs := scrape(t, fsys)
	for _, secret := range []string{"AKIDUSER", "s3cr3tpass", "qwertyzz", "endpoint", "frag"} {
		if strings.Contains(text, secret) {
			t.Errorf("scrape holds %q", secret)
		}
	}
	const want = "s3://bucket/pre/"
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "volume" {
					got = l.GetValue()
				}
			}
			if got != want {
				t.Errorf("%s %v: volume=%q, want %q", name, m.GetLabel(), got, want)
			}
		}
	}
	if _, ok := mfs["ckptfs_test_extra_total"]; !ok {
		t.Error("the collector registered later is not scraped")
	}
	bi := mfs["ckptfs_build_info"]
	if bi == nil || len(bi.GetMetric()) != 1 {
		t.Fatalf("ckptfs_build_info: %v", bi)
	}
	m := bi.GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	wantLabels := map[string]string{"version": "v1.2.3", "commit": "abc123-modified", "go": "go1.99", "volume": want}
	if !reflect.DeepEqual(labels, wantLabels) || m.GetGauge().GetValue() != 1 {
		t.Errorf("ckptfs_build_info %v = %v, want %v = 1", labels, m.GetGauge().GetValue(), wantLabels)
	}
}

// The volume label keeps the scheme, bucket and path, and nothing of user
// information, query or fragment.
func TestMetricsVolume(t *testing.T) {
	for in, want := range map[string]string{
		"s3://bucket/prefix":                        "s3://bucket/prefix",
		"s3://bucket/prefix/?region=x&secret_key=y": "s3://bucket/prefix/",
		"s3://key:secret@bucket/p":                  "s3://bucket/p",
		"s3://key:sec/ret@bucket/p":                 "s3://bucket/p",
		"s3://key:sec?ret@bucket/p":                 "s3://key:sec",
		"file:///var/lib/vol":                       "file:///var/lib/vol",
		"file:///var/lib/vol#x":                     "file:///var/lib/vol",
		"user:pass@bucket/p":                        "bucket/p",
		"mem://":                                    "mem://",
		"":                                          "",
	} {
		if got := metricsVolume(in); got != want {
			t.Errorf("metricsVolume(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(metricsVolume(in), "secret") || strings.Contains(metricsVolume(in), "pass") {
			t.Errorf("metricsVolume(%q) = %q: a secret is left", in, metricsVolume(in))
		}
	}
}

// Every histogram bucket is printed as the decimal it was written as: its
// le parses back and has at most 3 significant digits (the latencies) or is
// a whole number of bytes, never 9.999999999999999e-05.
func TestMetricsBucketsExactDecimals(t *testing.T) {
	cfg := config.MountDefault(1 << 30)
	fsys, err := New(context.Background(), mem.New(), Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	fsys.metrics.fuseSeconds.WithLabelValues("lookup").Observe(0.001)
	text, _ := scrape(t, fsys)
	re := regexp.MustCompile(`^(\w+)_bucket\{.*le="([^"]+)"`)
	n := 0
	for _, line := range strings.Split(text, "\n") {
		sm := re.FindStringSubmatch(line)
		if sm == nil {
			continue
		}
		name, le := sm[1], sm[2]
		n++
		if le == "+Inf" {
			continue
		}
		f, err := strconv.ParseFloat(le, 64)
		if err != nil {
			t.Errorf("%s: le=%q does not parse: %v", name, le, err)
			continue
		}
		if strings.HasSuffix(name, "_bytes") {
			if f != math.Trunc(f) {
				t.Errorf("%s: le=%q is not a whole number of bytes", name, le)
			}
			continue
		}
		mant, _, _ := strings.Cut(strings.ToLower(le), "e")
		digits := strings.TrimLeft(strings.ReplaceAll(mant, ".", ""), "0")
		if len(digits) > 3 {
			t.Errorf("%s: le=%q has %d significant digits", name, le, len(digits))
		}
	}
	if n == 0 {
		t.Fatal("no bucket in the scrape")
	}
}

// timeoutStore answers Head with the store's time-out and fails Get with
// the caller's own deadline.
type timeoutStore struct{ staging.Store }

func (timeoutStore) Head(context.Context, string) (staging.ObjectInfo, error) {
	return staging.ObjectInfo{}, fmt.Errorf("s3 head k: %w", staging.ErrTimeout)
}

func (timeoutStore) Get(context.Context, string, staging.Range) ([]byte, staging.ObjectInfo, error) {
	return nil, staging.ObjectInfo{}, fmt.Errorf("s3 get k: %w", context.DeadlineExceeded)
}

// A request the store did not answer in time counts in
// ckptfs_store_timeouts_total by operation; one cut by the caller's own
// deadline does not.
func TestMetricsStoreTimeouts(t *testing.T) {
	m, st := newMetrics(timeoutStore{mem.New()}, BuildInfo{}, "mem://")
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := st.Head(ctx, "k"); !errors.Is(err, staging.ErrTimeout) {
			t.Fatalf("head: %v", err)
		}
		if _, _, err := st.Get(ctx, "k", staging.Range{}); err == nil {
			t.Fatal("get: no error")
		}
	}
	got := map[string]float64{}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ckptfs_store_timeouts_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "op" {
					got[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	if got[staging.OpHead.String()] != 2 || got[staging.OpGet.String()] != 0 {
		t.Errorf("ckptfs_store_timeouts_total = %v, want 2 for %s and 0 for %s", got, staging.OpHead, staging.OpGet)
	}
}

// The PUT of a WAL record counts in ckptfs_wal_append_seconds; another
// object's does not.
func TestMetricsWALAppendSeconds(t *testing.T) {
	m, st := newMetrics(mem.New(), BuildInfo{}, "mem://")
	ctx := context.Background()
	for _, key := range []string{wal.RecordKey("files/ab/", 1), wal.RecordKey("files/ab/", 2), "files/ab/" + wal.Dir + "owner", "files/ab/head"} {
		if _, err := st.Put(ctx, key, []byte("x"), staging.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == "ckptfs_wal_append_seconds" {
			n = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if n != 2 {
		t.Errorf("ckptfs_wal_append_seconds counted %d PUTs, want the 2 records'", n)
	}
}

// Whatever the URL, the volume label keeps no user information, query or
// fragment: nothing of it is left past an '@', a '?' or a '#'.
func FuzzMetricsVolume(f *testing.F) {
	for _, s := range []string{"s3://k:s@b/p?x=y#z", "file:///a@b/c", "u:p@h", "s3://b/p", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		v := metricsVolume(u)
		if strings.ContainsAny(v, "@?#") {
			t.Fatalf("metricsVolume(%q) = %q", u, v)
		}
		if len(v) > len(u) {
			t.Fatalf("metricsVolume(%q) = %q: longer", u, v)
		}
	})
}
