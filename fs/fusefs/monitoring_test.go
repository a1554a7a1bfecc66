package fusefs

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// The dashboard and alert rules shipped in docs/monitoring.
const (
	alertRulesPath = "../../docs/monitoring/alerts.yml"
	dashboardPath  = "../../docs/monitoring/grafana-dashboard.json"
)

// promtool accepts the alert rules. It comes with Debian's prometheus
// package (.ci/run installs it); outside CI a machine without it skips.
// promtool check rules only reads the file: no server starts.
func TestMonitoringAlertRules(t *testing.T) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not installed (Debian package prometheus): %v", err)
		}
		t.Skipf("promtool not installed (Debian package prometheus): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "check", "rules", alertRulesPath).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", alertRulesPath, err, out)
	}
}

// metricNameRE finds the ckptfs metric names a rule or panel uses.
var metricNameRE = regexp.MustCompile(`\bckptfs_[a-z0-9_]*[a-z0-9]\b`)

// Every metric the alert rules and the dashboard name is one a mount
// serves: a histogram by its _bucket, _sum and _count series too.
func TestMonitoringMetricNames(t *testing.T) {
	fsys, err := New(context.Background(), mem.New(), Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	// A vector without a child is not gathered: give each one.
	fsys.metrics.fuseSeconds.WithLabelValues("lookup").Observe(0.001)
	fsys.metrics.copies.WithLabelValues("reference").Inc()
	_, mfs := scrape(t, fsys)
	served := map[string]bool{}
	for name, mf := range mfs {
		served[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				served[name+suffix] = true
			}
		}
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if len(dash.Panels) == 0 {
		t.Fatalf("%s: no panel", dashboardPath)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
		}
	}
	rules, err := os.ReadFile(alertRulesPath)
	if err != nil {
		t.Fatal(err)
	}
	for path, text := range map[string][]byte{dashboardPath: b, alertRulesPath: rules} {
		used := metricNameRE.FindAllString(string(text), -1)
		if len(used) == 0 {
			t.Errorf("%s names no ckptfs metric", path)
		}
		var unknown []string
		for _, name := range used {
			if !served[name] {
				unknown = append(unknown, name)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			t.Errorf("%s names metrics no mount serves: %v", path, unknown)
		}
	}
}

// Every family a mount serves is in docs/operations.md's table of metrics,
// by its name or a pattern there (ckptfs_wal_*).
func TestMetricsDocumented(t *testing.T) {
	fsys, err := New(context.Background(), mem.New(), Options{Config: config.MountDefault(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	fsys.metrics.fuseSeconds.WithLabelValues("lookup").Observe(0.001)
	fsys.metrics.copies.WithLabelValues("reference").Inc()
	_, mfs := scrape(t, fsys)
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []*regexp.Regexp
	for _, m := range regexp.MustCompile("`(ckptfs_[a-z0-9_*]+)").FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, regexp.MustCompile("^"+strings.ReplaceAll(m[1], "*", "[a-z0-9_]+")+"$"))
	}
	var missing []string
	for name := range mfs {
		if !strings.HasPrefix(name, "ckptfs_") {
			continue
		}
		if !slices.ContainsFunc(documented, func(re *regexp.Regexp) bool { return re.MatchString(name) }) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/operations.md's table of metrics lacks %v", missing)
	}
}
