package main

import (
	"slices"
	"testing"
)

// running returns which of models have a live server process.
func running(t *testing.T, models ...string) []string {
	t.Helper()
	var out []string
	for _, m := range models {
		if len(modelPids(t, m)) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// A swap sequence on a matrix config, with real processes: after each
// request, exactly the expected servers run.
func TestServe_MatrixSwapSequence(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/matrix.yaml")
	all := []string{"big", "gemma", "qwen", "voice"}
	for _, step := range []struct {
		request string
		want    []string
	}{
		{"gemma", []string{"gemma"}},          // alone: its set-mate voice is not started
		{"voice", []string{"gemma", "voice"}}, // (g & v) costs nothing to reach
		{"qwen", []string{"qwen", "voice"}},   // (q & v): evict gemma (cost 1), keep voice (50)
		{"big", []string{"big"}},              // solo: everything else goes
		{"voice", []string{"voice"}},          // back into standard; big goes
	} {
		s.mustChat(step.request)
		eventually(t, "the servers after "+step.request, func() bool {
			return slices.Equal(running(t, all...), step.want)
		})
	}
}
