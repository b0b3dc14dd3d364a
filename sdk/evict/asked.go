package evict

import (
	"cmp"
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

// Asked is a model asked for since a router last counted it: N requests,
// the last of them when the host last used the model (sdk.ModelInfo's
// LastUse, Unix nanoseconds).
type Asked struct {
	Name    string
	N       uint64
	LastUse int64
}

// AskedSince appends to dst every model of demand (sdk.ReadDemand's
// list) whose count grew past seen(i) — the count the router last took
// of demand[i] — and returns it sorted by LastUse, oldest first. The
// counts say how many requests each model had between two swaps, not in
// what order; the order of each model's last request is all the host
// tells, so a router that replays those requests through a rule whose
// state depends on their order (GDSF's ties; foresight's shadows) replays
// them in it. It reuses dst's storage.
func AskedSince(dst []Asked, h sdk.Host, demand []sdk.ModelDemand, seen func(i int) uint64) []Asked {
	dst = dst[:0]
	for i := range demand {
		d := &demand[i]
		if s := seen(i); d.Requests > s {
			m, _ := h.ModelState(d.Name)
			dst = append(dst, Asked{Name: d.Name, N: d.Requests - s, LastUse: m.LastUse})
		}
	}
	slices.SortStableFunc(dst, func(a, b Asked) int { return cmp.Compare(a.LastUse, b.LastUse) })
	return dst
}
