package sim

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
)

//go:embed html.tmpl
var htmlTemplate string

var page = template.Must(template.New("report").Funcs(template.FuncMap{"seconds": FormatSeconds}).Parse(htmlTemplate))

// WriteHTML writes the report as one self-contained HTML page: the
// summary table of every run (the CLI's columns, without the wall time,
// so the page is a function of the replay alone), the LRU and Belady
// limits, and per run a timeline chart (each GPU's memory over time with
// every model's residency at its offset, the callers held, the swaps)
// drawn by gonum/plot as inline SVG. The page loads nothing: no script, no
// font, no style sheet from elsewhere. The same Report writes the same
// bytes.
func (r *Report) WriteHTML(w io.Writer) error {
	data, err := r.htmlData()
	if err != nil {
		return err
	}
	return page.Execute(w, data)
}

// htmlPage is what html.tmpl shows.
type htmlPage struct {
	Trace    TraceInfo
	Duration string
	Bounds   *ColdLoads
	// LoadBound is the report's; RatioOf what the runs' Ratio divides
	// ("load s" or "cold loads"), "" where no bound applies.
	LoadBound *LoadBound
	RatioOf   string
	Models    []htmlModel
	Runs      []htmlRun
}

// htmlModel is a model's entry in the colour key.
type htmlModel struct {
	Name  string
	Color template.CSS
}

// htmlRun is one run: its row of the summary table and its section.
type htmlRun struct {
	ID, Scheduler, Router string
	Fallback              bool
	Completed, Errors     int
	ColdLoads, Evictions  int
	Unloads               int
	Wakes                 int       // swaps that woke a sleeper (DESIGN.md, "Residency")
	SwapS                 string    // swap seconds: the time requests waited on loads and wakes
	Wait                  [3]string // p50, p95, p99
	Worst                 string    // the worst model's p95 wait, and its name
	TTFT                  [2]string // p50, p95
	E2E95, Busy, Span     string
	Ratio                 string // RatioToBound, "–" where no bound applies
	// Best names the columns in which the run has the best figure of
	// all runs, when they differ.
	Best           map[string]bool
	ErrorsByCode   string
	PolicyFailures int
	PolicyEvents   []string
	Models         []htmlModelRow
	Chart          template.HTML
}

// htmlModelRow is one model's figures in a run.
type htmlModelRow struct {
	htmlModel
	Requests, Completed, Errors, ColdLoads int
	Wait                                   [3]string
}

func (r *Report) htmlData() (*htmlPage, error) {
	d := &htmlPage{Trace: r.Trace, Duration: clock(r.Trace.Duration), Bounds: r.Bounds, LoadBound: r.LoadBound}
	colors := newPalette(reportModels(r))
	for _, name := range colors.names {
		d.Models = append(d.Models, htmlModel{Name: name, Color: template.CSS(hex(colors.of(name)))})
	}
	xmax := r.Trace.Duration
	for _, run := range r.Runs {
		xmax = max(xmax, timelineEnd(run.Timeline))
	}
	for i, run := range r.Runs {
		row := htmlRun{
			ID:        fmt.Sprintf("run-%d", i+1),
			Scheduler: PolicyLabel(run.Scheduler), Router: PolicyLabel(run.Router) + EvictLabel(run.Evict), Fallback: run.Fallback,
			Completed: run.Completed, Errors: run.Errors,
			ColdLoads: run.ColdLoads, Evictions: run.Evictions, Unloads: run.Unloads,
			Wakes: run.Wakes, SwapS: FormatSeconds(run.SwapS),
			Wait:           [3]string{FormatSeconds(run.QueueWait.P50), FormatSeconds(run.QueueWait.P95), FormatSeconds(run.QueueWait.P99)},
			TTFT:           [2]string{FormatSeconds(run.TTFT.P50), FormatSeconds(run.TTFT.P95)},
			E2E95:          FormatSeconds(run.E2E.P95),
			Busy:           fmt.Sprintf("%.0f%%", 100*run.GPUBusyFraction),
			Ratio:          "–",
			Span:           FormatSeconds(run.SpanS),
			PolicyEvents:   run.PolicyEvents,
			PolicyFailures: run.PolicyFailures,
		}
		if name, mr, ok := run.WorstModel(); ok {
			row.Worst = fmt.Sprintf("%s (%s)", FormatSeconds(mr.QueueWait.P95), name)
		}
		for _, name := range slices.Sorted(maps.Keys(run.Models)) {
			mr := run.Models[name]
			row.Models = append(row.Models, htmlModelRow{
				htmlModel: htmlModel{Name: name, Color: template.CSS(hex(colors.of(name)))},
				Requests:  mr.Requests, Completed: mr.Completed, Errors: mr.Errors, ColdLoads: mr.ColdLoads,
				Wait: [3]string{FormatSeconds(mr.QueueWait.P50), FormatSeconds(mr.QueueWait.P95), FormatSeconds(mr.QueueWait.P99)},
			})
		}
		var codes []string
		for _, code := range slices.Sorted(maps.Keys(run.ErrorsByCode)) {
			codes = append(codes, fmt.Sprintf("%s %d", code, run.ErrorsByCode[code]))
		}
		row.ErrorsByCode = strings.Join(codes, ", ")
		chart, err := timelineSVG(run, colors, xmax, fmt.Sprintf("Timeline of %s + %s", row.Scheduler, row.Router))
		if err != nil {
			return nil, fmt.Errorf("%s + %s: %w", row.Scheduler, row.Router, err)
		}
		row.Chart = template.HTML(chart) // gonum's SVG, its text escaped by vgsvg
		if x, what, ok := r.RatioToBound(run); ok {
			row.Ratio, d.RatioOf = fmt.Sprintf("%.2f", x), what
		}
		d.Runs = append(d.Runs, row)
	}
	markBest(d.Runs, r.Runs)
	return d, nil
}

// markBest sets each row's Best: the columns in which its run has the
// best figure (most completed, least of the rest), when runs differ.
// Latencies are compared among runs that completed a request (the others'
// are 0 for want of any), counts among runs that had requests.
func markBest(rows []htmlRun, runs []*Result) {
	counts := func(r *Result) bool { return r.Requests > 0 }
	latencies := func(r *Result) bool { return r.Completed > 0 }
	cols := []struct {
		name string
		of   func(*Result) float64
		in   func(*Result) bool
	}{
		{"completed", func(r *Result) float64 { return -float64(r.Completed) }, counts},
		{"errors", func(r *Result) float64 { return float64(r.Errors) }, counts},
		{"cold", func(r *Result) float64 { return float64(r.ColdLoads) }, counts},
		{"evictions", func(r *Result) float64 { return float64(r.Evictions) }, counts},
		{"wait50", func(r *Result) float64 { return r.QueueWait.P50 }, latencies},
		{"wait95", func(r *Result) float64 { return r.QueueWait.P95 }, latencies},
		{"wait99", func(r *Result) float64 { return r.QueueWait.P99 }, latencies},
		{"worst", func(r *Result) float64 { _, mr, _ := r.WorstModel(); return mr.QueueWait.P95 }, latencies},
		{"ttft50", func(r *Result) float64 { return r.TTFT.P50 }, latencies},
		{"ttft95", func(r *Result) float64 { return r.TTFT.P95 }, latencies},
		{"e2e95", func(r *Result) float64 { return r.E2E.P95 }, latencies},
	}
	for _, col := range cols {
		var vals []float64
		for _, run := range runs {
			if col.in(run) {
				vals = append(vals, col.of(run))
			}
		}
		if len(vals) < 2 || slices.Min(vals) == slices.Max(vals) {
			continue
		}
		best := slices.Min(vals)
		for i, run := range runs {
			if col.in(run) && col.of(run) == best {
				if rows[i].Best == nil {
					rows[i].Best = map[string]bool{}
				}
				rows[i].Best[col.name] = true
			}
		}
	}
}

// reportModels are the models of every run, sorted: those requested and
// those the timeline shows.
func reportModels(r *Report) []string {
	seen := map[string]bool{}
	for _, run := range r.Runs {
		for m := range run.Models {
			seen[m] = true
		}
		for _, res := range run.Timeline.Residency {
			seen[res.Model] = true
		}
		for _, s := range run.Timeline.Swaps {
			seen[s.Target] = true
			for _, m := range s.Evict {
				seen[m] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// timelineEnd is the last time tl mentions.
func timelineEnd(tl Timeline) float64 {
	end := tl.Span
	for _, r := range tl.Residency {
		end = max(end, r.To)
	}
	if n := len(tl.Queue); n > 0 {
		end = max(end, tl.Queue[n-1].T)
	}
	if n := len(tl.Swaps); n > 0 {
		end = max(end, tl.Swaps[n-1].T)
	}
	return end
}

// EvictLabel is the suffix of a run's router label in the text and HTML
// reports for simulate --compare evict=…: " (evict stop)"; "" for the
// configuration's own.
func EvictLabel(evict string) string {
	if evict == "" {
		return ""
	}
	return " (evict " + evict + ")"
}
