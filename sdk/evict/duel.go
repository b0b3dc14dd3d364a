package evict

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

// Duel verdicts, for a router that weighs two eviction orders against each
// other (adaptive's experts, foresight's forecast against LRU): one
// order evicted x where the other would have evicted y, and whichever of
// the two is asked for first should have stayed.

// DuelVerdict decides a duel from the swap of target: x and y, whose
// request counts grew since the duel began when xNew and yNew. The target
// was asked for just now; a model whose count grew, not the target, was
// asked for before it; two that both grew, neither the target, came in an
// order the counts do not tell. decided false: no verdict yet (neither was
// asked for: keep the duel) or none ever (both were: drop it, with keep
// false). yFirst: y was asked for first, so evicting x was right.
func DuelVerdict(x, y, target string, xNew, yNew bool) (decided, yFirst, keep bool) {
	switch {
	case x == target:
		return true, yNew, false
	case y == target:
		return true, !xNew, false
	case xNew && yNew:
		return false, false, false
	case xNew || yNew:
		return true, yNew, false
	}
	return false, false, true
}

// Requests is name's request count in demand (sdk.ReadDemand's list); 0
// when it is not there.
func Requests(demand []sdk.ModelDemand, name string) uint64 {
	for i := range demand {
		if demand[i].Name == name {
			return demand[i].Requests
		}
	}
	return 0
}

// Evictable appends to dst the models of running (a SwapStartEvent's
// Running, in the order of models, which is the snapshot's) that another
// order could have evicted in their place: found in models, not busy or
// starting, not pinned. It returns the extended dst.
func Evictable(dst []*sdk.ModelInfo, models []sdk.ModelInfo, running []string) []*sdk.ModelInfo {
	next := 0
	for _, name := range running {
		if m := Find(models, name, &next); m != nil && ClassOf(m) != Busy && !m.Pinned {
			dst = append(dst, m)
		}
	}
	return dst
}

// Challenges pairs each model of evicted that another order would have
// kept with a model that order would have evicted in its place, and calls
// duel(x, y) for each pair: x evicted, y the other order's choice. alt is
// the other order's first len(evicted) candidates (Evictable, sorted in
// its order); the pairs are taken in the order of evicted and alt.
func Challenges(evicted []string, alt []*sdk.ModelInfo, duel func(x, y string)) {
	alt = alt[:min(len(alt), len(evicted))]
	next := 0 // the first of alt not yet paired
	for _, x := range evicted {
		if slices.ContainsFunc(alt, func(m *sdk.ModelInfo) bool { return m.Name == x }) {
			continue // the other order would have evicted it too
		}
		for next < len(alt) && slices.Contains(evicted, alt[next].Name) {
			next++ // evicted anyway: no alternative
		}
		if next == len(alt) {
			return
		}
		duel(x, alt[next].Name)
		next++
	}
}
