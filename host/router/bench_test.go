package router

import (
	"context"
	"testing"
)

// BenchmarkRouter_AcquireRelease is the scheduling cost of one request for
// a loaded model: Acquire and Release. With the warm path off ("off") that
// is OnRequest through the Wasm fifo, GrantServe and OnServeDone; with it
// ("warm") fifo has admitted the model and the loop grants it itself.
//
//	go test ./host/router -run '^$' -bench AcquireRelease
func BenchmarkRouter_AcquireRelease(b *testing.B) {
	for _, warm := range []bool{true, false} {
		b.Run(map[bool]string{true: "warm", false: "off"}[warm], func(b *testing.B) {
			benchAcquireRelease(b, newHarness(b, harnessOpts{noWarm: !warm}))
		})
	}
}

func benchAcquireRelease(b *testing.B, h *harness) {
	ctx := context.Background()
	g, err := h.r.Acquire(ctx, Request{Model: "e"})
	if err != nil {
		b.Fatal(err)
	}
	g.Release()
	b.ReportAllocs()
	for b.Loop() {
		g, err := h.r.Acquire(ctx, Request{Model: "e"})
		if err != nil {
			b.Fatal(err)
		}
		g.Release()
	}
}
