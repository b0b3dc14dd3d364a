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
// order the counts do not tell (askedAt, the rule Trial follows too).
// decided false: no verdict yet (neither was asked for: keep the duel) or
// none ever (both were: drop it, with keep false). yFirst: y was asked for
// first, so evicting x was right.
func DuelVerdict(x, y, target string, xNew, yNew bool) (decided, yFirst, keep bool) {
	ax, ay := askedAt(x, target, xNew), askedAt(y, target, yNew)
	switch {
	case ax == notAsked && ay == notAsked:
		return false, false, true
	case ax == ay:
		return false, false, false
	case ay == notAsked:
		return true, false, false
	case ax == notAsked:
		return true, true, false
	}
	return true, ay < ax, false
}

// When a model of a duel or trial was asked for, as one swap's counts
// tell (askedAt): the stages are in the order of the requests.
const (
	notAsked    = 0 // not since the duel or trial began
	askedBefore = 1 // before the swap's target; two such came in an order the counts do not tell
	askedNow    = 2 // it is the swap's target, asked for last
)

// askedAt is when model name was asked for, told by the swap of target:
// grew is whether its request count grew since the duel or trial began.
func askedAt(name, target string, grew bool) int {
	switch {
	case name == target:
		return askedNow
	case grew:
		return askedBefore
	}
	return notAsked
}

// Requests is name's request count in demand (Demand's entry); 0 when it
// is not there.
func Requests(demand []sdk.ModelDemand, name string) uint64 {
	if d := Demand(demand, name); d != nil {
		return d.Requests
	}
	return 0
}

// requestsAt is Requests, looking first at demand[at] (where name was
// before), and where it found name (at, if it is not there).
func requestsAt(demand []sdk.ModelDemand, name string, at int) (uint64, int) {
	next := at
	if k := demandIndex(demand, name, &next); k >= 0 {
		return demand[k].Requests, k
	}
	return 0, at
}

// demandIndex is search over a demand list (sorted by name): the index of
// name's entry, or -1, looking first at *next.
func demandIndex(demand []sdk.ModelDemand, name string, next *int) int {
	return search(len(demand), func(i int) string { return demand[i].Name }, name, next)
}

// Demand is name's entry in demand (sdk.ReadDemand's list, sorted by
// name, searched as Find searches a snapshot), or nil.
func Demand(demand []sdk.ModelDemand, name string) *sdk.ModelDemand {
	var next int
	if k := demandIndex(demand, name, &next); k >= 0 {
		return &demand[k]
	}
	return nil
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

// Duel is one eviction on which two orders (a router's experts, by
// index) disagreed: Chooser's evicted X where Other's would have evicted
// Y. XSeen and YSeen are their request counts (sdk.ModelDemand.Requests)
// when it began; whichever of the two is asked for first should have
// stayed (Belady's rule, after the fact).
type Duel struct {
	X, Y           string
	Chooser, Other int
	XSeen, YSeen   uint64
	// xAt and yAt are where X and Y were in demand when the duel began,
	// where Settle looks first (a router keeps up to a few dozen duels
	// waiting, and searching for each on every swap was most of a
	// replay's time on uniform traffic).
	xAt, yAt int
}

// Challenge appends to duels a Duel for each model of evicted that order
// other would have kept, against a model it would have evicted in its
// place: alt is other's candidates (Evictable, sorted in its order), of
// which the first len(evicted) count, paired in the order of evicted and
// alt. Counts are read from demand. At most max duels are kept, the
// oldest dropped; it returns the extended duels.
func Challenge(duels []Duel, evicted []string, alt []*sdk.ModelInfo, demand []sdk.ModelDemand, chooser, other, max int) []Duel {
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
			break
		}
		y := alt[next].Name
		next++
		d := Duel{X: x, Y: y, Chooser: chooser, Other: other}
		d.XSeen, d.xAt = requestsAt(demand, x, 0)
		d.YSeen, d.yAt = requestsAt(demand, y, 0)
		duels = append(duels, d)
	}
	if n := len(duels); n > max {
		duels = append(duels[:0], duels[n-max:]...)
	}
	return duels
}

// Settle decides every duel of duels whose two models' order of requests
// the swap of target tells (DuelVerdict, with demand's counts), calling
// lose with the index of the order that was wrong, and returns the
// undecided ones, in duels' storage.
func Settle(duels []Duel, demand []sdk.ModelDemand, target string, lose func(order int)) []Duel {
	kept := duels[:0]
	for _, d := range duels {
		var xn, yn uint64
		xn, d.xAt = requestsAt(demand, d.X, d.xAt)
		yn, d.yAt = requestsAt(demand, d.Y, d.yAt)
		decided, yFirst, keep := DuelVerdict(d.X, d.Y, target, xn > d.XSeen, yn > d.YSeen)
		switch {
		case keep:
			kept = append(kept, d) // neither asked for yet
		case !decided:
		case yFirst:
			lose(d.Other) // evicting X was right
		default:
			lose(d.Chooser)
		}
	}
	return kept
}
