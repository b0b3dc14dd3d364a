package router

import "github.com/loadout-dev/loadout/sdk"

// Demand implements sdk.DemandReader for both policies: every row of the
// model table (each replica its own), sorted by name like the snapshot.
func (fx *effects) Demand() []sdk.ModelDemand {
	l := &fx.r.loop
	out := make([]sdk.ModelDemand, 0, len(l.names))
	for _, name := range l.names {
		m := l.models[name]
		out = append(out, sdk.ModelDemand{Name: name, Requests: m.requests, Loads: m.loads, LoadTime: int64(m.loadTime)})
	}
	return out
}

func (h readOnlyHost) Demand() []sdk.ModelDemand { return h.fx.Demand() }
