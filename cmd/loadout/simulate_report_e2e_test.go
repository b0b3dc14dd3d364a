package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// simulateReport runs `loadout simulate` on the eight-model box and the
// code-agent trace under two routers, from the repository's root, writing
// --json and --html into a temporary directory, and returns their paths.
func simulateReport(t *testing.T) (jsonPath, htmlPath string) {
	t.Helper()
	dir := t.TempDir()
	jsonPath, htmlPath = filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
	cmd := exec.Command(loadoutBin, "simulate",
		"-c", "testdata/simulate/eight-models.yaml", "-t", "testdata/traces/code-agent6-5m.csv",
		"--compare", "router=group,prioritylru", "--html", htmlPath, "--json", jsonPath)
	cmd.Dir = filepath.Join("..", "..") // the report names the trace as given
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("loadout simulate: %v\n%s", err, out)
	}
	return jsonPath, htmlPath
}

func TestSimulate_WritesJSONAndHTML(t *testing.T) {
	jsonPath, htmlPath := simulateReport(t)
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Runs []struct {
			Router    string `json:"router"`
			Completed int    `json:"completed"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &report); err != nil {
		t.Fatalf("--json: %v", err)
	}
	if len(report.Runs) != 2 || report.Runs[0].Router != "builtin:group" || report.Runs[1].Router != "builtin:prioritylru" {
		t.Fatalf("--json runs %+v, want group then prioritylru", report.Runs)
	}
	b, err = os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, `<section class="run"`); n != 2 {
		t.Errorf("--html has %d run sections, want 2", n)
	}
	if n := strings.Count(page, `<svg class="chart"`); n != 2 {
		t.Errorf("--html has %d timelines, want 2", n)
	}
	for _, s := range []string{"GPU 0 (GiB)", "GPU 1 (GiB)", "code-agent6-5m.csv", "Belady"} {
		if !strings.Contains(page, s) {
			t.Errorf("--html lacks %q", s)
		}
	}
	for m := range 6 {
		if name := "m" + string(rune('1'+m)); !strings.Contains(page, "</span>"+name+"</li>") {
			t.Errorf("--html's colour key lacks %s", name)
		}
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Contains(page, "<script") {
		t.Error("--html refers to something outside the page")
	}
	t.Logf("report.html: %d bytes", len(b))
}

// The report opened from disk in headless Chromium: both
// timelines are laid out at the page's width. With LOADOUT_SCREENSHOTS=1
// it is docs/img/simulate-report.jpg.
func TestSimulate_ReportInBrowser(t *testing.T) {
	ctx := browser(t)
	_, htmlPath := simulateReport(t)
	var widths []float64
	err := chromedp.Run(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate("file://"+htmlPath),
		chromedp.WaitVisible(`#run-2 svg.chart`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("svg.chart")].map(s => s.getBoundingClientRect().width)`, &widths),
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(widths) != 2 || widths[0] < 800 || widths[1] != widths[0] {
		t.Fatalf("timeline widths %v, want two of the page's width", widths)
	}
	shot(t, ctx, "simulate-report.jpg")
}
