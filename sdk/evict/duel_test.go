package evict

import (
	"fmt"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

func TestDuelVerdict(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		target                string
		xNew, yNew            bool
		decided, yFirst, keep bool
	}{
		{"x is the target, y asked before", "x", false, true, true, true, false},
		{"x is the target, y not asked", "x", false, false, true, false, false},
		{"y is the target, x not asked", "y", false, false, true, true, false},
		{"y is the target, x asked before", "y", true, false, true, false, false},
		{"both asked, order unknown", "t", true, true, false, false, false},
		{"only y asked", "t", false, true, true, true, false},
		{"only x asked", "t", true, false, true, false, false},
		{"neither asked yet", "t", false, false, false, false, true},
	} {
		decided, yFirst, keep := DuelVerdict("x", "y", tc.target, tc.xNew, tc.yNew)
		if decided != tc.decided || yFirst != tc.yFirst || keep != tc.keep {
			t.Errorf("%s: DuelVerdict = %v, %v, %v; want %v, %v, %v", tc.name, decided, yFirst, keep, tc.decided, tc.yFirst, tc.keep)
		}
	}
}

func TestChallenge(t *testing.T) {
	models := []sdk.ModelInfo{
		{Name: "a", State: sdk.StateReady}, {Name: "b", State: sdk.StateReady, InFlight: 1},
		{Name: "c", State: sdk.StateReady, Pinned: true}, {Name: "d", State: sdk.StateStopping},
		{Name: "e", State: sdk.StateReady}, {Name: "f", State: sdk.StateStarting},
	}
	names := func(ms []*sdk.ModelInfo) (out []string) {
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	ev := Evictable(nil, models, []string{"a", "b", "c", "d", "e", "f", "gone"})
	if got := names(ev); !slices.Equal(got, []string{"a", "d", "e"}) {
		t.Fatalf("Evictable: %v, want [a d e] (not busy, pinned, starting or unknown)", got)
	}
	for _, tc := range []struct {
		evicted, alt []string
		want         string
	}{
		{[]string{"a"}, []string{"a", "e"}, "[]"},                   // the same choice
		{[]string{"a"}, []string{"e", "a"}, "[a/e]"},                // one duel
		{[]string{"a", "d"}, []string{"d", "e", "a"}, "[a/e]"},      // d agreed; e is a's alternative, only len(evicted) of alt count
		{[]string{"a", "d"}, []string{"e", "x", "y"}, "[a/e d/x]"},  // two duels in order
		{[]string{"a", "d", "e"}, []string{"d", "e", "y"}, "[a/y]"}, // y is the only alternative evicted keeps
		{[]string{"a", "d"}, []string{"d"}, "[]"},                   // no alternative left
		{[]string{"a", "d", "e"}, []string{"a", "x", "d"}, "[e/x]"}, // a, d agreed
		{[]string{"a"}, nil, "[]"},                                  // nothing the other order could evict
		{nil, []string{"a"}, "[]"},                                  // nothing evicted
	} {
		var alt []*sdk.ModelInfo
		for _, n := range tc.alt {
			alt = append(alt, &sdk.ModelInfo{Name: n})
		}
		var got []string
		for _, d := range Challenge(nil, tc.evicted, alt, nil, 0, 1, 64) {
			got = append(got, d.X+"/"+d.Y)
		}
		if g := fmt.Sprint(got); g != tc.want {
			t.Errorf("Challenge(%v, %v) = %s, want %s", tc.evicted, tc.alt, g, tc.want)
		}
	}
}

// Settle tells the order that was wrong, keeps the undecided duels and
// drops the ones the counts cannot order; Challenge keeps at most max.
func TestSettle(t *testing.T) {
	demand := []sdk.ModelDemand{{Name: "a", Requests: 5}, {Name: "b", Requests: 3}, {Name: "c", Requests: 7}, {Name: "d", Requests: 2}}
	duels := []Duel{
		{X: "a", Y: "b", Chooser: 0, Other: 1, XSeen: 5, YSeen: 2}, // b asked since: evicting a was right, 1 loses
		{X: "c", Y: "d", Chooser: 1, Other: 0, XSeen: 6, YSeen: 2}, // c asked since: 1 (the chooser) loses
		{X: "a", Y: "d", Chooser: 0, Other: 1, XSeen: 5, YSeen: 2}, // neither: kept
		{X: "b", Y: "c", Chooser: 0, Other: 1, XSeen: 2, YSeen: 6}, // both: dropped, no verdict
		{X: "t", Y: "a", Chooser: 0, Other: 1, XSeen: 0, YSeen: 5}, // x is the target: 0 loses
	}
	var lost []int
	kept := Settle(duels, demand, "t", func(o int) { lost = append(lost, o) })
	if !slices.Equal(lost, []int{1, 1, 0}) || len(kept) != 1 || kept[0].X != "a" || kept[0].Y != "d" {
		t.Fatalf("Settle: lost %v, kept %+v; want [1 1 0], the a/d duel", lost, kept)
	}
	var many []Duel
	for i := range 10 {
		many = Challenge(many, []string{fmt.Sprint("x", i)}, []*sdk.ModelInfo{{Name: fmt.Sprint("y", i)}}, nil, 0, 1, 4)
	}
	if len(many) != 4 || many[0].X != "x6" || many[3].X != "x9" {
		t.Fatalf("Challenge with max 4 kept %+v; want the last four, x6 to x9", many)
	}
}
