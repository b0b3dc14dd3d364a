package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/backends/sim/decode"
)

// TestSequence: the model sequence in order, one request per gap, one
// output token each, the input untouched; the gap outlasts the longest
// stop, load and lone serve; a model the box lacks and a span past
// MaxTraceSpan are errors.
func TestSequence(t *testing.T) {
	dec := decode.Model{TokensPerSecond: 10, TTFT: 500 * time.Millisecond, PrefillTokensPerSecond: 100, MaxBatch: 4}
	models := map[string]Model{
		"a": {Load: 4 * time.Second, Stop: time.Second, Decode: dec},
		"b": {Load: 9 * time.Second, Decode: dec, Wake: [2]time.Duration{time.Second, 2 * time.Second}},
	}
	in := []Request{
		{Arrival: 0, Model: "a", PromptTokens: 300, OutputTokens: 50, Priority: 2, Client: "x"},
		{Arrival: 0.1, Model: "b", PromptTokens: 10, OutputTokens: 7},
		{Arrival: 0.1, Model: "a", PromptTokens: 10, OutputTokens: 1},
	}
	keep := append([]Request(nil), in...)
	out, gap, err := Sequence(in, models)
	if err != nil {
		t.Fatal(err)
	}
	// 1 s stop + 9 s load + (0.5 s TTFT + 3 s prefill + 0.1 s step) + 1 s, rounded up.
	if gap != 15 {
		t.Errorf("gap %g s, want 15", gap)
	}
	for i, q := range out {
		want := keep[i]
		want.Arrival, want.OutputTokens = float64(i)*gap, 1
		if q != want {
			t.Errorf("request %d = %+v, want %+v", i, q, want)
		}
		if in[i] != keep[i] {
			t.Errorf("input request %d changed: %+v", i, in[i])
		}
	}
	if _, _, err := Sequence([]Request{{Model: "a"}, {Model: "c"}}, models); err == nil || !strings.Contains(err.Error(), `request 2: unknown model "c"`) {
		t.Errorf("unknown model: %v", err)
	}
	slow := map[string]Model{"a": {Load: time.Duration(MaxTraceSpan) * time.Second, Decode: dec}}
	if _, _, err := Sequence([]Request{{Model: "a"}, {Model: "a"}}, slow); err == nil || !strings.Contains(err.Error(), "more than a replay may") {
		t.Errorf("a span past MaxTraceSpan: %v", err)
	}
}
