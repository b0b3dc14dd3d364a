package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/loadout-dev/loadout/host/activity"
	"github.com/loadout-dev/loadout/host/proxy"
)

// uiBenchModels and uiBenchRows are the size of the box the UI benchmark
// opens: a catalog of 100 models and an activity log of 10,000 requests.
const (
	uiBenchModels = 100
	uiBenchRows   = 10000
)

// BenchmarkUI_FirstPaint opens the web UI in real headless Chromium on a
// server with 100 models (one loaded) and 10,000 rows in its activity log,
// and measures, per page load: the time from navigation to the first
// meaningful paint (every model row, the timeline and the summary strip
// drawn with data: ms/first-paint, by the page's own clock), the time to
// switch to the Activity tab and draw its rows (ms/activity-tab), the
// bytes the page fetched (KiB/page: its files and its API answers, as the
// browser's resource timing counts them, before compression: the server
// does not compress) and the DOM size at first paint (nodes).
//
//	go test -p 1 -run '^$' -bench BenchmarkUI_FirstPaint -benchtime 5x ./cmd/loadout/
func BenchmarkUI_FirstPaint(b *testing.B) {
	ctx := browser(b)
	dir := b.TempDir()
	db := filepath.Join(dir, "state.db")
	var cfg strings.Builder
	cfg.WriteString("healthCheckTimeout: 30\nstartPort: ${env.LOADOUT_E2E_START_PORT}\ngpus: [{name: sim0, memory: 80GiB}, {name: sim1, memory: 80GiB}]\nmodels:\n")
	for i := range uiBenchModels {
		fmt.Fprintf(&cfg, "  model-%03d:\n    backend: sim\n    vram: 2GiB\n    aliases: [m%d]\n    options: {load_time: 10ms, tokens_per_second: 400}\n", i, i)
	}
	log, err := activity.Open(db, activity.Options{Buffer: uiBenchRows + 1})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now().Add(-time.Hour)
	for i := range uiBenchRows {
		status := 200
		if i%50 == 0 {
			status = 502
		}
		log.Record(proxy.RequestSummary{ID: fmt.Sprintf("bench-%05d", i), Time: start.Add(time.Duration(i) * 300 * time.Millisecond),
			Model: fmt.Sprintf("model-%03d", i%uiBenchModels), Path: "/v1/chat/completions", Status: status,
			QueueWait: 0.01, TTFT: 0.05, PromptTokens: 40, CompletionTokens: 120, TokensPerSecond: 80, Duration: 1.6})
	}
	if err := log.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := log.Close(); err != nil {
		b.Fatal(err)
	}
	s := startServer(b, writeConfig(b, dir, cfg.String()), "--db", db)
	s.mustChat("model-000")
	s.mustChat("model-001")

	lastRow := fmt.Sprintf(`#models tr[data-model="model-%03d"]`, uiBenchModels-1)
	var paint, tabMS, bytes float64
	var nodes int
	b.ResetTimer()
	for range b.N {
		var p, t0, t1, kb float64
		var n int
		if err := chromedp.Run(ctx,
			chromedp.Navigate("about:blank"), // a fresh load each time, not a fragment change
			chromedp.Navigate(s.base+"/ui/#models"),
			chromedp.WaitVisible(lastRow, chromedp.ByQuery),
			chromedp.WaitVisible(`#timeline li[data-kind="swap"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#summary [data-fig="rps"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#gpus .bar span[data-holder]`, chromedp.ByQuery),
			chromedp.Evaluate(`performance.now()`, &p),
			chromedp.Evaluate(`document.getElementsByTagName('*').length`, &n),
			chromedp.Evaluate(`performance.now()`, &t0),
			tab("activity"),
			chromedp.WaitVisible(`#activity tr[data-request="bench-09999"]`, chromedp.ByQuery),
			chromedp.Evaluate(`performance.now()`, &t1),
			chromedp.Evaluate(`[...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
				.reduce((n, e) => n + (e.decodedBodySize || 0), 0) / 1024`, &kb),
		); err != nil {
			b.Fatalf("%v\n%s", err, s.log())
		}
		paint += p
		tabMS += t1 - t0
		bytes = kb
		nodes = n
	}
	b.ReportMetric(paint/float64(b.N), "ms/first-paint")
	b.ReportMetric(tabMS/float64(b.N), "ms/activity-tab")
	b.ReportMetric(bytes, "KiB/page")
	b.ReportMetric(float64(nodes), "nodes")
	b.ReportMetric(0, "ns/op")
}
