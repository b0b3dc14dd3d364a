package router

import (
	"context"
	"testing"
)

// BenchmarkRouter_AcquireRelease is the scheduling cost of one request for
// a loaded model: Acquire (OnRequest through the Wasm fifo, its Plan through
// the Wasm group swapper, GrantServe) and Release (OnServeDone).
//
//	go test ./host/router -run '^$' -bench AcquireRelease
func BenchmarkRouter_AcquireRelease(b *testing.B) {
	h := newHarness(b, harnessOpts{})
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
