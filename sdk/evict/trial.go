package evict

import (
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/internal/bytewise"
)

// Trial is one eviction judged for many orders at once (a router's
// estimators, by index): among the same candidates, order i would have
// evicted Victims[By[i]]. It is a Duel of as many sides as there are
// distinct victims, settled by the same rule (Belady's, after the fact):
// a victim asked for while another victim has not been asked for yet
// should have stayed, and every order that chose it was wrong. The
// victims asked for between two swaps came in an order the counts do not
// tell, the swap's target last (askedAt, DuelVerdict's rule); the trial
// ends when at most one victim has not been asked for. A router scores
// many orders on the evictions it makes without carrying any of them out
// (foresight chooses its forecast so).
type Trial struct {
	// Victims are the distinct models the orders would have evicted.
	Victims []string
	// By is, per order, the index in Victims of its victim; -1 for an
	// order that chose none.
	By []int
	// state is each victim's, position for position; left counts the
	// victims not asked for yet.
	state []victimState
	left  int
}

// victimState is what a trial keeps of one victim: its request count
// when the trial began, where it was in the demand list (where
// SettleTrials looks first), and whether it has been asked for since.
type victimState struct {
	seen uint64
	at   int
	done bool
}

// maxVictims bounds a trial's distinct victims (a bit each in
// SettleTrials).
const maxVictims = 64

// Start makes t the trial of one eviction for len(victims) orders:
// victims[i] is the model order i would evict, "" for none. Counts are
// read from demand (sdk.ReadDemand's list). It returns false, and t is no
// trial, when fewer than two distinct models were chosen: the orders
// agreed, and the eviction tells nothing between them. Past 64 distinct
// victims, the orders that chose another are not judged (By -1). It
// reuses t's storage, so trials started in those SettleTrials dropped
// (StartTrial) allocate nothing once they have grown (an
// allocation costs ~1.3 µs in Go compiled to Wasm and brings its garbage
// collections nearer, and a router starts a trial at every swap that
// evicts).
func (t *Trial) Start(victims []string, demand []sdk.ModelDemand) bool {
	t.By = append(t.By[:0], make([]int, len(victims))...)
	distinct := 0
	for i, v := range victims {
		t.By[i] = -1
		if v == "" {
			continue
		}
		t.By[i] = i // the first order that chose v, for now
		for j := range i {
			if t.By[j] == j && victims[j] == v { // a first choice of v
				t.By[i] = j
				break
			}
		}
		if t.By[i] == i {
			distinct++
		}
	}
	t.Victims, t.state, t.left = t.Victims[:0], t.state[:0], 0
	if distinct < 2 {
		return false
	}
	for i, first := range t.By {
		switch {
		case first < 0:
		case first == i && len(t.Victims) < maxVictims:
			t.By[i] = len(t.Victims)
			var st victimState
			st.seen, st.at = requestsAt(demand, victims[i], 0)
			t.Victims = append(t.Victims, victims[i])
			t.state = append(t.state, st)
		case first == i:
			t.By[i] = -1 // past maxVictims
		default:
			t.By[i] = t.By[first] // first < i: already an index in Victims, or -1
		}
	}
	t.left = len(t.Victims)
	return true
}

// StartTrial appends to trials the trial of one eviction for
// len(victims) orders (Trial.Start), in the storage of one SettleTrials
// dropped where there is one, and returns the trials; unchanged when the
// orders agreed. At most max trials are kept, the oldest dropped (its
// storage kept past the returned length for the next), as Challenge keeps
// its duels.
func StartTrial(trials []Trial, victims []string, demand []sdk.ModelDemand, max int) []Trial {
	n := len(trials)
	if n < cap(trials) {
		trials = trials[:n+1]
	} else {
		trials = append(trials, Trial{})
	}
	if !trials[n].Start(victims, demand) {
		return trials[:n]
	}
	if n >= max {
		oldest := trials[0]
		copy(trials, trials[1:])
		trials[n] = oldest
		return trials[:n]
	}
	return trials
}

// SettleTrials moves every trial of trials on by the swap of target: the
// victims asked for since it began, by demand's counts, before the target
// and then the target itself, each cost every order that chose it a lost
// trial (lose, with the order's index) while another victim has not been
// asked for yet. It returns the trials still undecided, in trials'
// storage, and leaves those it dropped past the returned slice's length
// (trials[len(returned):len(trials)]), for StartTrial to reuse; a router
// that keeps at most a few dozen trials (StartTrial's max) bounds the work
// of each swap.
func SettleTrials(trials []Trial, demand []sdk.ModelDemand, target string, lose func(order int)) []Trial {
	n := 0
	for k := range trials {
		t := &trials[k]
		// One bit per victim asked for before the target, and the target's.
		var before, now uint64
		for i, v := range t.Victims {
			st := &t.state[i]
			if st.done {
				continue
			}
			var c uint64
			if a := st.at; a < len(demand) && bytewise.SameString(demand[a].Name, v) {
				c = demand[a].Requests // where it was: the list rarely changes
			} else {
				c, st.at = requestsAt(demand, v, a)
			}
			switch askedAt(v, target, c > st.seen) {
			case askedBefore:
				before |= 1 << i
			case askedNow:
				now |= 1 << i
			}
		}
		t.asked(before, lose)
		t.asked(now, lose)
		if t.left >= 2 {
			trials[n], trials[k] = trials[k], trials[n]
			n++
		}
	}
	return trials[:n]
}

// asked marks the victims of set (a bit each), asked for at once, and
// costs the orders that chose them a lost trial while another victim has
// not been asked for.
func (t *Trial) asked(set uint64, lose func(order int)) {
	if set == 0 || t.left < 2 {
		return
	}
	for i := range t.Victims {
		if set&(1<<i) != 0 {
			t.state[i].done = true
			t.left--
		}
	}
	if t.left == 0 {
		return // all asked for at once: the counts do not tell which was first
	}
	for order, k := range t.By {
		if k >= 0 && set&(1<<k) != 0 {
			lose(order)
		}
	}
}
