package evict

import (
	"maps"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// demandOf is a demand list naming names (sorted by the caller), every
// count 0.
func demandOf(names ...string) []sdk.ModelDemand {
	l := make([]sdk.ModelDemand, len(names))
	for i, n := range names {
		l[i].Name = n
	}
	return l
}

// TestRows_FollowTheirModels: each row is its model's, across reloads that
// add, remove and rename models, and a model removed and added again gets
// its own row back.
func TestRows_FollowTheirModels(t *testing.T) {
	var r Rows[int]
	check := func(step string, list []sdk.ModelDemand, want ...int) []*int {
		t.Helper()
		row := r.Align(list)
		var got []int
		for i, p := range row {
			if p != r.Get(list[i].Name) {
				t.Fatalf("%s: row %d is not %s's (Get)", step, i, list[i].Name)
			}
			got = append(got, *p)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: rows hold %v, want %v", step, got, want)
		}
		return row
	}
	row := check("first", demandOf("a", "b", "c"), 0, 0, 0)
	*row[0], *row[1], *row[2] = 1, 2, 3
	check("same names", demandOf("a", "b", "c"), 1, 2, 3)
	check("c renamed to b2 (as many models)", demandOf("a", "b", "b2"), 1, 2, 0)
	check("b removed", demandOf("a", "b2"), 1, 0)
	check("b and c back", demandOf("a", "b", "b2", "c"), 1, 2, 0, 3)
	if r.Get("zz") != nil {
		t.Error("Get found a model never listed")
	}
	all := maps.Collect(r.All())
	if len(all) != 4 || *all["c"] != 3 || *all["b"] != 2 {
		t.Errorf("All yielded %d models (c %v, b %v), want a, b, b2, c", len(all), all["c"], all["b"])
	}
	check("empty list", nil)
	if len(maps.Collect(r.All())) != 4 {
		t.Error("an empty list dropped the rows kept")
	}
}

// BenchmarkRows_Align is a swap's walk of an unchanged list of 86 models.
//
//	cd sdk && go test ./evict -run '^$' -bench Rows
func BenchmarkRows_Align(b *testing.B) {
	names := make([]string, 86)
	for i := range names {
		names[i] = string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	list := demandOf(names...)
	var r Rows[float64]
	r.Align(list)
	for b.Loop() {
		for _, p := range r.Align(list) {
			*p++
		}
	}
}

// AskedSince lists the models whose counts grew, by how much, in the
// order the host last used them; a count that did not grow, or fell (a
// model removed and added again), lists nothing.
func TestAskedSince_InTheOrderOfLastUse(t *testing.T) {
	h := policytest.NewHost(t,
		sdk.ModelInfo{Name: "a", LastUse: 30},
		sdk.ModelInfo{Name: "b", LastUse: 10},
		sdk.ModelInfo{Name: "c", LastUse: 20},
		sdk.ModelInfo{Name: "d", LastUse: 5})
	demand := []sdk.ModelDemand{{Name: "a", Requests: 4}, {Name: "b", Requests: 2}, {Name: "c", Requests: 7}, {Name: "d", Requests: 1}}
	seen := []uint64{1, 2, 6, 3}
	got := AskedSince(nil, h, demand, func(i int) uint64 { return seen[i] })
	want := []Asked{{"c", 1, 20}, {"a", 3, 30}}
	if !slices.Equal(got, want) {
		t.Errorf("AskedSince = %v, want %v", got, want)
	}
}
