package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// Benchmarks of one Plan, natively and through the real Wasm runtime with
// its production options (a per-call deadline, which makes every loop
// iteration and call of guest code cost tens of nanoseconds). The Floor
// benchmark runs the same requests through a swapper that does nothing, to
// show what the SDK and the host cost before any policy code runs.

// exampleQuery switches the LLM of llama-swap's example matrix: three
// combinations contain the target.
var exampleQuery = sdk.PlanRequest{Target: "qwen-model", Running: []string{"gemma-model", "voxtral-model"}}

// matrix64 generates a 64-model matrix of 10,132 combinations, like
// llama-swap's solver benchmark: "main" is t with one model from each of
// four groups of ten (10,000 combinations, all of them containing t), and
// "side" pairs two other groups (132). weighted gives the a models cost 2
// and the b models cost 5 (as llama-swap's benchmark does), so the solver
// takes bestLaneByPatterns instead of bestLaneUniform.
//
// The query loads t with a9, b9, c9 and d9 running (and a model outside
// the matrix): only the last of t's 10,000 combinations keeps all four, so
// the solver reads every lane.
func matrix64(weighted bool) (settings string, q sdk.PlanRequest) {
	vars := map[string]string{"t": "t"}
	group := func(prefix string, n int) string {
		alts := make([]string, n)
		for i := range alts {
			alts[i] = fmt.Sprintf("%s%d", prefix, i)
			vars[alts[i]] = alts[i]
		}
		return "(" + strings.Join(alts, " | ") + ")"
	}
	main := "t & " + group("a", 10) + " & " + group("b", 10) + " & " + group("c", 10) + " & " + group("d", 10)
	side := group("e", 11) + " & " + group("f", 12)
	var quoted []string
	for _, id := range slices.Sorted(maps.Keys(vars)) {
		quoted = append(quoted, fmt.Sprintf("%q: %q", id, vars[id]))
	}
	costs := "{}"
	if weighted {
		var cs []string
		for i := range 10 {
			cs = append(cs, fmt.Sprintf(`"a%d": 2, "b%d": 5`, i, i))
		}
		costs = "{" + strings.Join(cs, ", ") + "}"
	}
	settings = fmt.Sprintf(`{"matrix": {"vars": {%s}, "evict_costs": %s, "sets": [{"name": "main", "expr": %q}, {"name": "side", "expr": %q}]}}`,
		strings.Join(quoted, ", "), costs, main, side)
	return settings, sdk.PlanRequest{Target: "t", Running: []string{"a9", "b9", "c9", "d9", "outside"}}
}

// TestMatrix64: the benchmark matrix is what it says, and its query keeps
// the last combination.
func TestMatrix64(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		settings, q := matrix64(weighted)
		sw, err := New(policytest.NewHost(t), []byte(settings))
		if err != nil {
			t.Fatal(err)
		}
		m := sw.(*swapper).m
		if len(m.models) != 64 || len(m.setOf) != 10_132 || len(m.targets[m.index["t"]].combos) != 10_000 {
			t.Fatalf("%d models, %d combinations, %d with t; want 64, 10,132 and 10,000",
				len(m.models), len(m.setOf), len(m.targets[m.index["t"]].combos))
		}
		checkPlan(t, policytest.NativeSwapper(sw), q, []string{"outside"})
		if combo := m.solve(q.Target, q.Running, &scratch{}); combo != 9_999 {
			t.Errorf("combination %d chosen, want the last of main's, 9999", combo)
		}
	}
}

func checkPlan(tb testing.TB, sw policytest.Swapper, q sdk.PlanRequest, want []string) {
	tb.Helper()
	p, err := sw.Plan(q)
	if err != nil || !slices.Equal(p.Evict, want) {
		tb.Fatalf("Plan(%q, %q) = %q, %v; want %q", q.Target, q.Running, p.Evict, err, want)
	}
}

func benchNative(b *testing.B, settings string, q sdk.PlanRequest, want []string) {
	s, err := New(policytest.NewHost(b), []byte(settings))
	if err != nil {
		b.Fatal(err)
	}
	checkPlan(b, policytest.NativeSwapper(s), q, want)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Plan(q); err != nil {
			b.Fatal(err)
		}
	}
}

// benchWasm runs the module as the host does: policy.Options{} is the
// production per-call deadline.
func benchWasm(b *testing.B, settings string, q sdk.PlanRequest, want []string) {
	benchModule(b, pkgPath, settings, q, want)
}

func benchModule(b *testing.B, pkg, settings string, q sdk.PlanRequest, want []string) {
	ctx := context.Background()
	rt, err := policy.NewRuntime(ctx, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	mod, err := rt.Compile(ctx, "swapper", wasmbuild.MustBuild(b, pkg))
	if err != nil {
		b.Fatal(err)
	}
	sw, err := rt.NewSwapper(ctx, mod, []byte(settings), policytest.NewHost(b))
	if err != nil {
		b.Fatal(err)
	}
	checkPlan(b, sw, q, want)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sw.Plan(q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan_Example_Native(b *testing.B) {
	benchNative(b, example, exampleQuery, []string{"gemma-model"})
}

func BenchmarkPlan_Example_Wasm(b *testing.B) {
	benchWasm(b, example, exampleQuery, []string{"gemma-model"})
}

func BenchmarkPlan_64Models_Native(b *testing.B) {
	settings, q := matrix64(false)
	benchNative(b, settings, q, []string{"outside"})
}

func BenchmarkPlan_64Models_Wasm(b *testing.B) {
	settings, q := matrix64(false)
	benchWasm(b, settings, q, []string{"outside"})
}

func BenchmarkPlan_64ModelsWeighted_Native(b *testing.B) {
	settings, q := matrix64(true)
	benchNative(b, settings, q, []string{"outside"})
}

func BenchmarkPlan_64ModelsWeighted_Wasm(b *testing.B) {
	settings, q := matrix64(true)
	benchWasm(b, settings, q, []string{"outside"})
}

// BenchmarkPlan_Floor_Wasm: the same requests through host/policy's test
// swapper, whose Plan returns at once: the SDK's and the host's share of
// the figures above.
func BenchmarkPlan_Floor_Wasm(b *testing.B) {
	const floor = "github.com/loadout-dev/loadout/host/policy/testdata/guests/swapper"
	_, q64 := matrix64(false)
	b.Run("example", func(b *testing.B) { benchModule(b, floor, `{"max_running": 1000}`, exampleQuery, nil) })
	b.Run("64models", func(b *testing.B) { benchModule(b, floor, `{"max_running": 1000}`, q64, nil) })
}

// BenchmarkNew_64Models: compiling the 64-model matrix, once per init.
func BenchmarkNew_64Models_Native(b *testing.B) {
	settings, _ := matrix64(false)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(policytest.NewHost(b), []byte(settings)); err != nil {
			b.Fatal(err)
		}
	}
}
