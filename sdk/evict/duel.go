package evict

import "github.com/loadout-dev/loadout/sdk"

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
