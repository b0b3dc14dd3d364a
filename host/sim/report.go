package sim

import (
	"encoding/json"
	"io"
)

// Report is a `loadout simulate` run of one trace under one or more
// policy pairs: what --json writes and --html draws.
type Report struct {
	// Trace names the trace file and counts what it holds.
	Trace TraceInfo `json:"trace"`
	// Runs are the replays in the order the policy pairs were given.
	Runs []*Result `json:"runs"`
	// Bounds are the cold-load limits of the trace's model sequence, when
	// every model needs the same VRAM (K equal slots); nil otherwise.
	Bounds *ColdLoads `json:"bounds,omitempty"`
	// LoadBound is the trace's load-time bound, when models differ in
	// size or load time; nil otherwise.
	LoadBound *LoadBound `json:"load_bound,omitempty"`
	// SequenceGap is, for a sequence replay (Sequence: the trace's model
	// sequence one request at a time, TTLs off), the seconds between
	// arrivals; 0 for a replay of the trace's own arrivals. The bounds are
	// the trace's either way.
	SequenceGap float64 `json:"sequence_gap_s,omitempty"`
}

// RatioToBound is run's cost over the trace's offline bound: its load
// seconds over LoadBound.Lower where there is a LoadBound, else its cold
// loads over Belady's; what names the pair ("load s" or "cold loads").
// False where neither bound applies or the bound is 0.
func (r *Report) RatioToBound(run *Result) (ratio float64, what string, ok bool) {
	switch {
	case r.LoadBound != nil && r.LoadBound.Lower > 0:
		return r.LoadBound.LoadSeconds(run) / r.LoadBound.Lower, "load s", true
	case r.Bounds != nil && r.Bounds.Belady > 0:
		return float64(run.ColdLoads) / float64(r.Bounds.Belady), "cold loads", true
	}
	return 0, "", false
}

// TraceInfo describes a replayed trace.
type TraceInfo struct {
	File     string  `json:"file"`
	Requests int     `json:"requests"`
	Models   int     `json:"models"`   // distinct models it asks for
	Duration float64 `json:"duration"` // from the first arrival to the last, seconds
}

// Describe is the TraceInfo of reqs read from file.
func Describe(file string, reqs []Request) TraceInfo {
	seen := map[string]bool{}
	for _, q := range reqs {
		seen[q.Model] = true
	}
	ti := TraceInfo{File: file, Requests: len(reqs), Models: len(seen)}
	if len(reqs) > 0 {
		ti.Duration = reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	}
	return ti
}

// WriteJSON writes the report as indented JSON:
// {"trace":{…},"runs":[{"scheduler","router","requests","completed",
// "errors","cold_loads","evictions","queue_wait_s":{"p50","p95","p99"},
// "ttft_s":{…},"e2e_s":{…},"gpu_busy_fraction","wall_s",…}],"bounds":{…},
// "load_bound":{…},"ratios_to_bound":[…]}, the last one per run
// (RatioToBound; omitted where no bound applies).
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		*Report
		Ratios []float64 `json:"ratios_to_bound,omitempty"`
	}{Report: r}
	for _, run := range r.Runs {
		if x, _, ok := r.RatioToBound(run); ok {
			out.Ratios = append(out.Ratios, x)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
