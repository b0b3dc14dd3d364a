package evict

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

// countsOf is a demand list (sorted by name) of the given request counts.
func countsOf(counts map[string]uint64) []sdk.ModelDemand {
	var list []sdk.ModelDemand
	for name, n := range counts {
		list = append(list, sdk.ModelDemand{Name: name, Requests: n})
	}
	slices.SortFunc(list, func(a, b sdk.ModelDemand) int { return strings.Compare(a.Name, b.Name) })
	return list
}

// A trial of two victims is a duel: it reaches DuelVerdict's verdict in
// every case of the swap that follows.
func TestTrial_TwoVictimsIsADuel(t *testing.T) {
	for _, target := range []string{"x", "y", "t"} {
		for _, xNew := range []bool{false, true} {
			for _, yNew := range []bool{false, true} {
				if (target == "x" && xNew) || (target == "y" && yNew) {
					continue // the target's own growth is its request now
				}
				start := countsOf(map[string]uint64{"t": 1, "x": 1, "y": 1})
				var tr Trial
				if !tr.Start([]string{"x", "y"}, start) {
					t.Fatal("Start with two distinct victims: no trial")
				}
				after := map[string]uint64{"t": 1, "x": 1, "y": 1}
				if xNew {
					after["x"]++
				}
				if yNew {
					after["y"]++
				}
				after[target]++
				var lost []int
				kept := SettleTrials([]Trial{tr}, countsOf(after), target, func(o int) { lost = append(lost, o) })
				decided, yFirst, keep := DuelVerdict("x", "y", target, xNew, yNew)
				var want []int
				if decided && yFirst {
					want = []int{1} // y was asked first: the order that evicted y was wrong
				} else if decided {
					want = []int{0}
				}
				if !slices.Equal(lost, want) || (len(kept) == 1) != keep {
					t.Errorf("target %s, x asked %v, y asked %v: lost %v, kept %d; DuelVerdict says lost %v, keep %v",
						target, xNew, yNew, lost, len(kept), want, keep)
				}
			}
		}
	}
}

// Many orders, three victims: each victim asked for while another is not
// yet costs the orders that chose it; the last one's orders lose nothing.
func TestTrial_JudgesEveryOrder(t *testing.T) {
	counts := map[string]uint64{"a": 5, "b": 5, "c": 5, "t": 0}
	var tr Trial
	if tr.Start([]string{"a", "a", ""}, countsOf(counts)) {
		t.Error("Start where every order chose a: a trial, want none (they agreed)")
	}
	ok := tr.Start([]string{"a", "b", "c", "a", ""}, countsOf(counts))
	if !ok || !slices.Equal(tr.Victims, []string{"a", "b", "c"}) || !slices.Equal(tr.By, []int{0, 1, 2, 0, -1}) {
		t.Fatalf("Start: %v %v %v, want victims [a b c] by [0 1 2 0 -1]", ok, tr.Victims, tr.By)
	}
	losses := make([]int, 5)
	lose := func(o int) { losses[o]++ }
	trials := []Trial{tr}

	counts["t"]++ // a swap that asked for none of them
	if trials = SettleTrials(trials, countsOf(counts), "t", lose); len(trials) != 1 || slices.Max(losses) != 0 {
		t.Fatalf("after a swap of another model: %d trials, losses %v; want 1, none", len(trials), losses)
	}
	counts["b"] += 3 // b asked for, a and c not yet
	counts["t"]++
	if trials = SettleTrials(trials, countsOf(counts), "t", lose); len(trials) != 1 || !slices.Equal(losses, []int{0, 1, 0, 0, 0}) {
		t.Fatalf("after b was asked for: %d trials, losses %v; want 1, [0 1 0 0 0]", len(trials), losses)
	}
	counts["c"]++ // c is the target: a is the last, the right victim
	if trials = SettleTrials(trials, countsOf(counts), "c", lose); len(trials) != 0 || !slices.Equal(losses, []int{0, 1, 1, 0, 0}) {
		t.Errorf("after c was asked for: %d trials, losses %v; want 0, [0 1 1 0 0]", len(trials), losses)
	}
}

// Victims asked for between the same two swaps tie: with another still not
// asked for, all their orders lose; when none is left, the counts do not
// tell which came first, and nobody loses.
func TestTrial_VictimsAskedTogether(t *testing.T) {
	counts := map[string]uint64{"a": 1, "b": 1, "c": 1, "t": 1}
	for _, tc := range []struct {
		asked []string
		want  []int
		kept  int
	}{
		{[]string{"a", "b"}, []int{1, 1, 0}, 0},
		{[]string{"a", "b", "c"}, []int{0, 0, 0}, 0},
	} {
		var tr Trial
		tr.Start([]string{"a", "b", "c"}, countsOf(counts))
		after := map[string]uint64{"a": 1, "b": 1, "c": 1, "t": 2}
		for _, m := range tc.asked {
			after[m]++
		}
		losses := make([]int, 3)
		kept := SettleTrials([]Trial{tr}, countsOf(after), "t", func(o int) { losses[o]++ })
		if !slices.Equal(losses, tc.want) || len(kept) != tc.kept {
			t.Errorf("%v asked together: losses %v, %d kept; want %v, %d", tc.asked, losses, len(kept), tc.want, tc.kept)
		}
	}
}

// SettleTrials leaves the trials it drops past the kept ones, and Start
// reuses a dropped trial's storage: a trial started there judges afresh.
func TestTrial_DroppedTrialsAreReused(t *testing.T) {
	counts := map[string]uint64{"a": 1, "b": 1, "c": 1, "d": 1, "t": 1}
	trials := make([]Trial, 3)
	trials[0].Start([]string{"a", "b"}, countsOf(counts))
	trials[1].Start([]string{"c", "d"}, countsOf(counts))
	trials[2].Start([]string{"a", "c"}, countsOf(counts))
	counts["b"]++ // decides the first trial; the others wait
	counts["t"]++
	kept := SettleTrials(trials, countsOf(counts), "t", func(int) {})
	if len(kept) != 2 || kept[0].Victims[0] != "c" || kept[1].Victims[1] != "c" {
		t.Fatalf("kept %d trials, want the two undecided in order: %+v", len(kept), kept)
	}
	dropped := &trials[len(kept)]
	if !slices.Equal(dropped.Victims, []string{"a", "b"}) {
		t.Fatalf("past the kept trials: %v, want the dropped trial [a b]", dropped.Victims)
	}
	if !dropped.Start([]string{"d", "a", "a"}, countsOf(counts)) || !slices.Equal(dropped.Victims, []string{"d", "a"}) ||
		!slices.Equal(dropped.By, []int{0, 1, 1}) {
		t.Fatalf("Start on a dropped trial: victims %v by %v, want [d a] by [0 1 1]", dropped.Victims, dropped.By)
	}
	var lost []int
	counts["a"]++ // a asked for, d not: the orders that chose a lose
	counts["t"]++
	SettleTrials([]Trial{*dropped}, countsOf(counts), "t", func(o int) { lost = append(lost, o) })
	if !slices.Equal(lost, []int{1, 2}) {
		t.Errorf("a reused trial: lost %v, want [1 2] (its own counts, not the dropped trial's)", lost)
	}
}

// StartTrial adds a trial only where the orders disagree, keeps the newest
// max, and starts each new trial in storage a dropped one left.
func TestStartTrial_KeepsTheNewestMax(t *testing.T) {
	demand := countsOf(map[string]uint64{"a": 1, "b": 1, "c": 1, "d": 1})
	var trials []Trial
	if trials = StartTrial(trials, []string{"a", "a"}, demand, 2); len(trials) != 0 {
		t.Fatalf("orders that agreed started %d trials, want 0", len(trials))
	}
	for _, pair := range [][]string{{"a", "b"}, {"b", "c"}, {"c", "d"}} {
		trials = StartTrial(trials, pair, demand, 2)
	}
	if len(trials) != 2 || trials[0].Victims[0] != "b" || trials[1].Victims[0] != "c" {
		t.Fatalf("after three trials with max 2: %d kept, first victims %v; want [b c] and [c d]", len(trials), trials)
	}
	if spare := trials[:cap(trials)][2]; !slices.Equal(spare.Victims, []string{"a", "b"}) {
		t.Fatalf("past the kept trials: %v, want the dropped oldest [a b] (its storage kept)", spare.Victims)
	}
	// As SettleTrials leaves a decided trial: past the kept ones.
	before := &trials[1].Victims[0]
	trials = StartTrial(trials[:1], []string{"d", "a"}, demand, 2)
	if len(trials) != 2 || !slices.Equal(trials[1].Victims, []string{"d", "a"}) || &trials[1].Victims[0] != before {
		t.Errorf("a trial started after one was dropped: %v, want [d a] in the dropped trial's storage", trials[1].Victims)
	}
}
