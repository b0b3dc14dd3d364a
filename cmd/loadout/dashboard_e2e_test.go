package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// dashboardPath is the Grafana dashboard shipped in docs/.
var dashboardPath = filepath.Join("..", "..", "docs", "grafana", "loadout.json")

// nvmlOnly are the series the dashboard may use that a `loadout serve`
// without NVML does not expose, with why: the test runs without a GPU.
// Each is covered by a unit test of its collector.
var nvmlOnly = map[string]string{
	"loadout_gpu_utilization_ratio": "a declared device's utilisation is unknown, so it has no sample (TestDeviceCollector_UtilizationAndHolders)",
}

// PromQL's words that look like identifiers but are not metric names:
// keywords, binary operators, and the number literals Inf and NaN.
// Functions and aggregations are told by the "(" that follows them.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true,
	"inf": true, "nan": true,
}

var (
	// Removed before identifiers are read: string literals, label
	// matchers, range and subquery selectors, grouping label lists, and
	// Grafana variables ($model, ${model}, $__rate_interval).
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`(?i)\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlVars     = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	// An identifier, and what follows it (a "(" makes it a function).
	promqlIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	// Grafana's label_values(metric, label) in a variable's query.
	labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

// promqlMetricNames returns the metric names expr selects, in order of
// first use: the identifiers left once strings, label matchers, ranges,
// grouping lists and variables are removed that are neither a function
// or aggregation (followed by "("), a keyword, nor part of a number.
func promqlMetricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{promqlStrings, promqlVars, promqlMatchers, promqlRanges, promqlGrouping} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, loc := range promqlIdent.FindAllStringSubmatchIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[2] >= 0 { // a call
			continue
		}
		if loc[0] > 0 && strings.ContainsAny(expr[loc[0]-1:loc[0]], "0123456789.") {
			continue // 1e3, 0x1f, 1.5e-3: part of a number
		}
		if promqlKeywords[strings.ToLower(name)] || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestPromQLMetricNames_Extracts(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`sum by (model, code) (rate(loadout_requests_total{model=~"$model",code!="200"}[$__rate_interval]))`, "loadout_requests_total"},
		{`histogram_quantile(0.95, sum by (le, model) (rate(a_seconds_bucket{x="y{z}"}[5m])))`, "a_seconds_bucket"},
		{`loadout_gpu_memory_used_bytes * on (gpu) group_left (name) loadout_gpu_info`, "loadout_gpu_memory_used_bytes loadout_gpu_info"},
		{`loadout_policy_active == 1 and ignoring(fallback) up offset 5m`, "loadout_policy_active up"},
		{`topk(5, sum without (instance) (rate(x_total[1h:5m]))) > bool 1e3 or vector(0)`, "x_total"},
		{`max_over_time(process_resident_memory_bytes[${__range}]) / Inf`, "process_resident_memory_bytes"},
	} {
		if got := strings.Join(promqlMetricNames(tc.expr), " "); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.expr, got, tc.want)
		}
	}
}

// dashboardQueries returns every PromQL expression of the dashboard (its
// panels' targets, rows' panels included) by panel title, and the metrics
// its variables' label_values queries read.
func dashboardQueries(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	byPanel := map[string][]string{}
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: a panel: %v", dashboardPath, err)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				byPanel[p.Title] = append(byPanel[p.Title], tg.Expr)
			}
		}
	}
	walk(d.Panels)
	var vars []string
	for _, v := range d.Templating.List {
		for _, m := range labelValues.FindAllStringSubmatch(string(v.Query), -1) {
			vars = append(vars, m[1])
		}
	}
	return byPanel, vars
}

// exposedNames returns the sample names a Prometheus text exposition
// holds (a histogram's _bucket, _sum and _count, a summary's _sum and
// _count), parsed by Prometheus's own parser.
func exposedNames(t *testing.T, text string) (map[string]bool, map[string]*dto.MetricFamily) {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	names := map[string]bool{}
	for name, mf := range mfs {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
	return names, mfs
}

// A real `loadout serve` (a sim model on a declared GPU, a peer, the job
// queue) serves a request of its own, one it forwards and one for a model
// it does not know; then every
// metric that docs/grafana/loadout.json's queries and variables name is
// on its /metrics, and the series issue 25 named read as they should.
func TestServe_DashboardQueriesNameExposedMetrics(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		case "/v1/chat/completions":
			fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer peer.Close()
	cfg := fmt.Sprintf(`startPort: ${env.LOADOUT_E2E_START_PORT}
gpus: [{name: sim0, memory: 8GiB}]
models:
  a: {backend: sim, vram: 1GiB, options: {load_time: 50ms, tokens_per_second: 200, max_batch: 4}}
peers:
  p: {proxy: %q, models: [m], health: {interval: 1h, timeout: 5s}}
`, peer.URL)
	s := startServer(t, writeConfig(t, t.TempDir(), cfg))
	s.mustChat("a")
	s.mustChat("p/m")
	if code, body := s.post("/v1/chat/completions", chat("nowhere", false)); code != http.StatusNotFound {
		t.Fatalf("an unknown model: %d %s", code, body)
	}
	var text string
	eventually(t, "the peer's first check", func() bool {
		_, text = s.get("/metrics")
		return strings.Contains(text, `loadout_peer_up{peer="p"} 1`)
	})
	exposed, mfs := exposedNames(t, text)

	byPanel, vars := dashboardQueries(t)
	if len(byPanel) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	used := map[string]bool{}
	check := func(where, name string) {
		used[name] = true
		if !exposed[name] && nvmlOnly[name] == "" {
			t.Errorf("%s uses %s, which loadout serve does not expose", where, name)
		}
	}
	for title, exprs := range byPanel {
		n := 0
		for _, e := range exprs {
			names := promqlMetricNames(e)
			n += len(names)
			for _, name := range names {
				check(fmt.Sprintf("panel %q", title), name)
			}
		}
		if n == 0 {
			t.Errorf("panel %q names no metric: %q", title, exprs)
		}
	}
	for _, name := range vars {
		check("a variable", name)
	}
	for name := range nvmlOnly {
		if !used[name] {
			t.Errorf("nvmlOnly lists %s, which the dashboard does not use", name)
		}
	}

	// The series of issue 25, as they read after one local and one
	// forwarded request.
	for _, want := range []string{
		`loadout_in_flight_requests{model="a"} 0`,
		`loadout_time_to_first_token_seconds_count{model="a"} 1`,
		`loadout_upstream_time_to_first_token_seconds_count{model="a"} 1`,
		`loadout_peer_request_duration_seconds_count{code="200",peer="p"} 1`,
		`loadout_unrouted_requests_total{code="404"} 1`,
		`loadout_gpu_info{gpu="0",name="sim0",uuid=""} 1`,
		`loadout_gpu_memory_total_bytes{gpu="0"} 8.589934592e+09`,
		`loadout_policy_failures_total{policy="builtin:fifo",role="scheduler"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, gone := range []string{"loadout_in_flight{", "loadout_gpu_utilization_ratio{", `device="`} {
		if strings.Contains(text, gone) {
			t.Errorf("/metrics still has %s", gone)
		}
	}
	bi := mfs["loadout_build_info"]
	if bi == nil || len(bi.GetMetric()) != 1 || bi.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("loadout_build_info: %v", bi)
	}
	labels := map[string]string{}
	for _, l := range bi.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != version || labels["revision"] == "" || !strings.HasPrefix(labels["goversion"], "go") {
		t.Errorf("loadout_build_info labels %v: want version %q, a revision and the Go version", labels, version)
	}
}
