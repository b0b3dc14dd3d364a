package router

import (
	"context"
	"fmt"
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

// countObserver is an Observer that only counts what it hears.
type countObserver struct{ nopObserver }

// BenchmarkRouter_Observer is the warm path's Acquire + Release with an
// Observer attached, at 4 and at 100 configured models: the observer's
// per-event diff of every model (observeModels) is the part that grows.
//
//	go test ./host/router -run '^$' -bench Observer
func BenchmarkRouter_Observer(b *testing.B) {
	for _, n := range []int{4, 100} {
		b.Run(fmt.Sprintf("models=%d", n), func(b *testing.B) {
			models := map[string]ModelConfig{}
			for i := range n - 4 {
				models[fmt.Sprintf("m%03d", i)] = ModelConfig{}
			}
			benchAcquireRelease(b, newHarness(b, harnessOpts{models: models, observer: countObserver{}}))
		})
	}
}
