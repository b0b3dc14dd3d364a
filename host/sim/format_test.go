package sim

import "testing"

func TestFormatSeconds(t *testing.T) {
	for s, want := range map[float64]string{0: "0", 0.0042: "4.2ms", 1.254: "1.25s", 37.4: "37s"} {
		if got := FormatSeconds(s); got != want {
			t.Errorf("FormatSeconds(%g) = %q, want %q", s, got, want)
		}
	}
}

func TestPolicyLabel(t *testing.T) {
	for name, want := range map[string]string{"builtin:fifo": "fifo", "/home/me/mine.wasm": "mine.wasm", "mine.wasm": "mine.wasm"} {
		if got := PolicyLabel(name); got != want {
			t.Errorf("PolicyLabel(%q) = %q, want %q", name, got, want)
		}
	}
}

// The worst model is the highest p95 wait among models that completed a
// request, the first by name among equals.
func TestResult_WorstModel(t *testing.T) {
	r := &Result{Models: map[string]ModelResult{
		"idle": {Requests: 2, Errors: 2},
		"b":    {Completed: 1, QueueWait: Quantiles{P95: 7}},
		"a":    {Completed: 1, QueueWait: Quantiles{P95: 7}},
		"c":    {Completed: 1, QueueWait: Quantiles{P95: 3}},
	}}
	if name, mr, ok := r.WorstModel(); !ok || name != "a" || mr.QueueWait.P95 != 7 {
		t.Errorf("WorstModel() = %q, %+v, %v; want a with 7", name, mr, ok)
	}
	if _, _, ok := (&Result{}).WorstModel(); ok {
		t.Error("a run without models has a worst one")
	}
}
