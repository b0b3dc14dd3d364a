package router

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

// Demand as policies read it (the `demand` import): every model, sorted,
// with every request that arrived for it — those the warm path granted
// without the scheduler too — and its completed cold loads with the last
// one's duration.
func TestRouter_DemandCounts(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for range 3 {
		h.acquire("a").wait(t).Release()
	}
	h.acquire("c").wait(t).Release()
	var got []sdk.ModelDemand
	h.r.OnLoop(func() { got = h.r.loop.fx.Demand() })
	want := map[string]struct {
		requests uint64
		loads    uint32
	}{"a": {3, 1}, "b": {0, 0}, "c": {1, 1}, "e": {0, 0}}
	if len(got) != len(want) {
		t.Fatalf("demand of %d models, want %d: %+v", len(got), len(want), got)
	}
	for i, d := range got {
		if i > 0 && got[i-1].Name >= d.Name {
			t.Errorf("not sorted by name: %+v", got)
		}
		w := want[d.Name]
		if d.Requests != w.requests || d.Loads != w.loads {
			t.Errorf("%s: %d requests, %d loads; want %d, %d", d.Name, d.Requests, d.Loads, w.requests, w.loads)
		}
		if (d.Loads > 0) != (d.LoadTime > 0) {
			t.Errorf("%s: %d loads, last load %d ns", d.Name, d.Loads, d.LoadTime)
		}
	}
}
