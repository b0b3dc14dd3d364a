package sim

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// How reports name and print things: the CLI's table and the HTML page
// read the same.

// PolicyLabel is how reports name a policy: "builtin:fifo" as fifo, a
// .wasm file by its base name.
func PolicyLabel(name string) string {
	if n, ok := strings.CutPrefix(name, "builtin:"); ok {
		return n
	}
	return filepath.Base(name)
}

// FormatSeconds is how reports print a duration in seconds: 0, 4.2ms,
// 1.25s, 37s.
func FormatSeconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 0.01:
		return fmt.Sprintf("%.1fms", s*1000)
	case s < 10:
		return fmt.Sprintf("%.2fs", s)
	default:
		return fmt.Sprintf("%.0fs", s)
	}
}

// WorstModel is the model with the highest p95 queue wait among those
// that completed a request (the first by name among equals); false when
// none did. A policy good on average may starve one model: this shows it.
func (r *Result) WorstModel() (string, ModelResult, bool) {
	var name string
	var worst ModelResult
	found := false
	for _, m := range slices.Sorted(maps.Keys(r.Models)) {
		mr := r.Models[m]
		if mr.Completed > 0 && (!found || mr.QueueWait.P95 > worst.QueueWait.P95) {
			name, worst, found = m, mr, true
		}
	}
	return name, worst, found
}
