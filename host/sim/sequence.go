package sim

import (
	"fmt"
	"math"
	"time"
)

// Sequence is reqs as a sequence replay: one request at a time, request i
// arriving at i × gap seconds with one output token, gap (seconds) long
// enough for any request to finish alone — the longest stop, the longest
// cold load and the longest single-request serve of any model, plus a
// second — so each arrives at an idle box whose last swap has ended.
// Those are the terms the classical anchors and Belady's optimum are
// computed on (Bounds: a model sequence served in arrival order, loads
// taking no time), so a router's cold loads in a sequence replay compare
// with theirs exactly: the LRU router makes LRU's. The caller must also
// turn TTLs off (the anchors have none). It returns a new slice; reqs is
// not changed. Errors: a model reqs names that models lacks, and a gap so
// long that the replay would span more than MaxTraceSpan.
func Sequence(reqs []Request, models map[string]Model) (out []Request, gap float64, err error) {
	var stop, load, serve time.Duration
	for i, q := range reqs {
		m, ok := models[q.Model]
		if !ok {
			return nil, 0, fmt.Errorf("trace request %d: unknown model %q", i+1, q.Model)
		}
		stop = max(stop, m.Stop)
		load = max(load, m.Load, m.Wake[0], m.Wake[1])
		serve = max(serve, m.Decode.Prefill(q.PromptTokens)+m.Decode.Step(1))
	}
	gap = math.Ceil((stop + load + serve + time.Second).Seconds())
	if span := gap * float64(max(len(reqs)-1, 0)); span > MaxTraceSpan {
		return nil, 0, fmt.Errorf("a sequence replay of %d requests %g s apart would span %.3g s, more than a replay may (%g s)", len(reqs), gap, span, float64(MaxTraceSpan))
	}
	out = make([]Request, len(reqs))
	for i, q := range reqs {
		q.Arrival = float64(i) * gap
		q.OutputTokens = 1
		out[i] = q
	}
	return out, gap, nil
}
