package sim

import (
	"bytes"
	"encoding/xml"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// handReport is a report of three runs: one on two 24 GiB GPUs with every
// kind of residency and swap (and a model requested but never loaded),
// one without GPUs, and one of an empty trace.
func handReport() *Report {
	gpus := &Result{
		Scheduler: "builtin:fifo", Router: "builtin:prioritylru", Requests: 10, Completed: 9, Errors: 1,
		ErrorsByCode: map[string]int{"queue_full": 1}, ColdLoads: 3, Evictions: 1,
		QueueWait: Quantiles{P50: 0.5, P95: 4, P99: 12}, TTFT: Quantiles{P50: 0.6, P95: 4.2}, E2E: Quantiles{P95: 20},
		GPUBusyFraction: 0.31, SpanS: 120, WallS: 0.25,
		Models: map[string]ModelResult{
			"alpha":           {Requests: 4, Completed: 4, ColdLoads: 1, QueueWait: Quantiles{P50: 0.2, P95: 1, P99: 1}},
			"beta":            {Requests: 3, Completed: 3, ColdLoads: 1, QueueWait: Quantiles{P50: 0.5, P95: 12, P99: 12}},
			"gamma & <delta>": {Requests: 2, Completed: 2, ColdLoads: 1, QueueWait: Quantiles{P50: 4, P95: 4, P99: 4}},
			"never":           {Requests: 1, Errors: 1}, // requested, never loaded
		},
		Timeline: Timeline{
			Devices: []Device{{Index: 0, Bytes: 24 * gib}, {Index: 1, Bytes: 24 * gib}},
			Residency: []Residency{
				{Model: "alpha", State: "starting", Devices: []int{0}, Bytes: 12 * gib, From: 0, To: 6},
				{Model: "beta", State: "starting", Devices: []int{0}, Bytes: 10 * gib, From: 1, To: 9},
				{Model: "alpha", State: "ready", Devices: []int{0}, Bytes: 12 * gib, From: 6, To: 60},
				{Model: "beta", State: "ready", Devices: []int{0}, Bytes: 10 * gib, From: 9, To: 58},
				{Model: "beta", State: "stopping", Devices: []int{0}, Bytes: 10 * gib, From: 58, To: 60},
				{Model: "alpha", State: "stopping", Devices: []int{0}, Bytes: 12 * gib, From: 60, To: 60}, // instant
				{Model: "gamma & <delta>", State: "starting", Devices: []int{0, 1}, Bytes: 40 * gib, From: 60, To: 70},
				{Model: "gamma & <delta>", State: "ready", Devices: []int{0, 1}, Bytes: 40 * gib, From: 70, To: 120},
			},
			Queue: []Point{{T: 0, V: 1}, {T: 1, V: 3}, {T: 9, V: 0}, {T: 58, V: 2}, {T: 70, V: 0}},
			Swaps: []Swap{
				{T: 0, Target: "alpha", Cold: true},
				{T: 1, Target: "beta", Cold: true},
				{T: 30, Target: "alpha"},
				{T: 58, Target: "gamma & <delta>", Evict: []string{"alpha", "beta"}, Cold: true},
			},
			Span: 120,
		},
	}
	lanes := &Result{
		Scheduler: "builtin:fifo", Router: "/home/me/mine.wasm", Requests: 10, Completed: 10, ColdLoads: 2,
		Fallback: true, PolicyFailures: 1, PolicyEvents: []string{"3.000s: swapper on_swap failed: boom"},
		Timeline: Timeline{
			Residency: []Residency{
				{Model: "beta", State: "starting", From: 0, To: 3},
				{Model: "beta", State: "ready", From: 3, To: 90},
				{Model: "alpha", State: "starting", From: 5, To: 8},
				{Model: "alpha", State: "ready", From: 8, To: 90},
			},
			Queue: []Point{{T: 0, V: 1}, {T: 3, V: 0}},
			Swaps: []Swap{{T: 0, Target: "beta", Cold: true}, {T: 5, Target: "alpha", Cold: true}},
			Span:  90,
		},
	}
	empty := &Result{Scheduler: "builtin:fifo", Router: "builtin:group"}
	return &Report{
		Trace:  TraceInfo{File: "testdata/traces/hand.csv", Requests: 10, Models: 3, Duration: 65},
		Runs:   []*Result{gpus, lanes, empty},
		Bounds: &ColdLoads{Slots: 4, LRU: 5, Belady: 3},
	}
}

func writeHTML(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var chartRE = regexp.MustCompile(`(?s)<svg class="chart".*?</svg>`)

func TestWriteHTML_OneChartPerRunWithEveryModel(t *testing.T) {
	page := writeHTML(t, handReport())
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var sections, charts, keys []string
	var walk func(n *html.Node, run string)
	walk = func(n *html.Node, run string) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "section" && attr(n, "class") == "run":
				run = attr(n, "id")
				sections = append(sections, run)
			case n.Data == "svg" && attr(n, "class") == "chart":
				charts = append(charts, run)
			case n.Data == "li" && n.Parent != nil && attr(n.Parent, "class") == "key":
				keys = append(keys, textOf(n))
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, run)
		}
	}
	walk(doc, "")
	if want := []string{"run-1", "run-2", "run-3"}; !slices.Equal(sections, want) || !slices.Equal(charts, want) {
		t.Errorf("sections %v with charts in %v, want one chart in each of %v", sections, charts, want)
	}
	if want := []string{"alpha", "beta", "gamma & <delta>", "never"}; !slices.Equal(keys, want) {
		t.Errorf("colour key %q, want %q", keys, want)
	}
	for _, s := range []string{"prioritylru", "mine.wasm", "queue_full 1", "12s (beta)", "<summary>Per model</summary>", "swapper on_swap failed: boom", "LRU <b>5</b>", "offline optimum <b>3</b>"} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	// Each chart is well-formed XML and names its models in their blocks
	// (the GPU run's alpha and beta are wide enough to be labelled).
	svgs := chartRE.FindAllString(page, -1)
	if len(svgs) != 3 {
		t.Fatalf("%d inline charts, want 3", len(svgs))
	}
	for i, svg := range svgs {
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("chart %d is not well-formed: %v", i+1, err)
			}
		}
	}
	for _, s := range []string{">alpha</text>", ">beta</text>", ">GPU 0 (GiB)</text>", ">GPU 1 (GiB)</text>"} {
		if !strings.Contains(svgs[0], s) {
			t.Errorf("the GPU run's chart lacks %q", s)
		}
	}
	for _, s := range []string{">models</text>", ">alpha</text>", ">beta</text>"} { // lanes, by name
		if !strings.Contains(svgs[1], s) {
			t.Errorf("the run without GPUs lacks %q", s)
		}
	}
}

// The page loads nothing from elsewhere: no script, no style sheet, no
// font, no image, and no URL at all (vgsvg's namespace declarations are
// dropped: an HTML parser needs none).
func TestWriteHTML_SelfContained(t *testing.T) {
	page := writeHTML(t, handReport())
	for _, s := range []string{"http://", "https://", "<script", "<link", "<img", "@import", "url(", "<?xml"} {
		if strings.Contains(page, s) {
			t.Errorf("the page contains %q", s)
		}
	}
}

func TestWriteHTML_ByteIdentical(t *testing.T) {
	first := writeHTML(t, handReport())
	for range 3 {
		if again := writeHTML(t, handReport()); again != first {
			t.Fatal("the same report wrote different pages")
		}
	}
}

func TestWriteHTML_NoRuns(t *testing.T) {
	page := writeHTML(t, &Report{Trace: TraceInfo{File: "empty.csv"}})
	if !strings.Contains(page, "No runs.") || strings.Contains(page, "<svg") {
		t.Errorf("a report without runs:\n%s", page)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}
