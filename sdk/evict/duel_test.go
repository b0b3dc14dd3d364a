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

func TestChallenges(t *testing.T) {
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
		Challenges(tc.evicted, alt, func(x, y string) { got = append(got, x+"/"+y) })
		if g := fmt.Sprint(got); g != tc.want {
			t.Errorf("Challenges(%v, %v) = %s, want %s", tc.evicted, tc.alt, g, tc.want)
		}
	}
}
