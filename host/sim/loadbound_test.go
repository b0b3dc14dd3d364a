package sim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
)

// bruteOPT is the least load time of any demand-paging schedule of seq on
// one device of capUnits (every subset of residents may be evicted at a
// miss), by exhaustive search: the optimum the bounds sandwich.
func bruteOPT(seq []int, units []int64, cost []float64, capUnits int64) float64 {
	memo := map[[2]int]float64{}
	var best func(p, mask int) float64
	best = func(p, mask int) float64 {
		if p == len(seq) {
			return 0
		}
		key := [2]int{p, mask}
		if v, ok := memo[key]; ok {
			return v
		}
		m := seq[p]
		v := math.Inf(1)
		if mask&(1<<m) != 0 {
			v = best(p+1, mask)
		} else {
			for keep := mask; ; keep = (keep - 1) & mask { // every subset to keep
				var used int64
				for i := range units {
					if keep&(1<<i) != 0 {
						used += units[i]
					}
				}
				if used+units[m] <= capUnits {
					v = min(v, cost[m]+best(p+1, keep|1<<m))
				}
				if keep == 0 {
					break
				}
			}
		}
		memo[key] = v
		return v
	}
	return best(0, 0)
}

// bruteLP is the interval LP flowBound solves, by enumerating every
// integral number of units kept per interval (the matrix is an interval
// matrix, so an integral optimum exists).
func bruteLP(seq []int, units []int64, cost []float64, capUnits int64) float64 {
	type iv struct{ from, to, m int } // keeps m over requests from…to−1
	var ivs []iv
	var total float64
	last := map[int]int{}
	for p, m := range seq {
		q, seen := last[m]
		last[m] = p
		if !seen {
			total += cost[m]
		} else if q < p-1 && units[m] > 0 {
			total += cost[m]
			ivs = append(ivs, iv{q + 1, p, m})
		}
	}
	best := total
	f := make([]int64, len(ivs))
	var walk func(i int)
	walk = func(i int) {
		if i == len(ivs) {
			for p, m := range seq {
				used := units[m]
				for j, v := range ivs {
					if v.from <= p && p < v.to {
						used += f[j]
					}
				}
				if used > capUnits {
					return
				}
			}
			v := total
			for j, x := range ivs {
				v -= float64(f[j]) * cost[x.m] / float64(units[x.m])
			}
			best = min(best, v)
			return
		}
		for f[i] = 0; f[i] <= units[ivs[i].m]; f[i]++ {
			walk(i + 1)
		}
	}
	walk(0)
	return best
}

// On small random instances of mixed sizes and load times the flow
// finds the interval LP's optimum, which is below every schedule (the
// exhaustive optimum), which the size-aware Belady schedule meets or
// exceeds; with equal sizes the flow is the optimum itself, and with
// equal costs too it is Belady's count.
func TestFlowBound_AgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := range 400 {
		models := 2 + r.IntN(3)
		equal := trial%2 == 0
		capUnits := int64(2 + r.IntN(3))
		units, cost := make([]int64, models), make([]float64, models)
		sizes := make([]uint64, models)
		for i := range units {
			units[i] = 1
			if !equal {
				units[i] = 1 + r.Int64N(capUnits)
			}
			sizes[i] = uint64(units[i])
			cost[i] = float64(1 + r.IntN(9))
		}
		n := 2 + r.IntN(9)
		if !equal {
			n = 2 + r.IntN(6) // the LP's enumeration grows as sizes^intervals
		}
		seq := make([]int, n)
		for i := range seq {
			seq[i] = r.IntN(models)
		}
		lower := flowBound(seq, units, cost, capUnits)
		opt := bruteOPT(seq, units, cost, capUnits)
		feasible, loads := sizeAwareBelady(seq, sizes, cost, []uint64{uint64(capUnits)})
		if lp := bruteLP(seq, units, cost, capUnits); math.Abs(lower-lp) > 1e-6 {
			t.Fatalf("%v units %v cost %v cap %d: flow %v, LP %v", seq, units, cost, capUnits, lower, lp)
		}
		if lower > opt+1e-6 || opt > feasible+1e-6 || loads > n {
			t.Fatalf("%v units %v cost %v cap %d: lower %v, optimum %v, feasible %v (%d loads)", seq, units, cost, capUnits, lower, opt, feasible, loads)
		}
		if equal && math.Abs(lower-opt) > 1e-6 {
			t.Fatalf("equal sizes %v cost %v cap %d: flow %v, optimum %v", seq, cost, capUnits, lower, opt)
		}
		ones := make([]float64, models)
		for i := range ones {
			ones[i] = 1
		}
		if equal {
			if got, want := flowBound(seq, units, ones, capUnits), float64(beladyLoads(seq, int(capUnits))); got != want {
				t.Fatalf("%v cap %d: flow %v, Belady %v", seq, capUnits, got, want)
			}
		}
	}
}

// BoxBounds: equal sizes and load times give cold loads alone; different
// load times add a LoadBound counted in slots; different sizes give a
// LoadBound alone; run's load seconds weigh its cold loads by load time.
func TestBoxBounds_WhichApply(t *testing.T) {
	const gib = 1 << 30
	mk := func(vram uint64, load time.Duration) Model {
		return Model{Config: router.ModelConfig{VRAM: vram}, Load: load}
	}
	reqs := seq("a", "b", "c", "a", "b", "c", "a")
	same := map[string]Model{"a": mk(12*gib, time.Second), "b": mk(12*gib, time.Second), "c": mk(12*gib, time.Second)}
	if cl, lb := BoxBounds(reqs, same, []uint64{24 * gib}); cl == nil || cl.Slots != 2 || cl.Belady != 5 || lb != nil || len(cl.Anchors) != 8 {
		t.Fatalf("equal: %+v, %+v", cl, lb)
	}
	slow := map[string]Model{"a": mk(12*gib, 10*time.Second), "b": mk(12*gib, time.Second), "c": mk(12*gib, time.Second)}
	cl, lb := BoxBounds(reqs, slow, []uint64{24 * gib})
	if cl == nil || lb == nil || lb.Unit != 12*gib {
		t.Fatalf("load times differ: %+v, %+v", cl, lb)
	}
	// a stays (10 s); b and c share the other slot: a b c b c = 10 + 1 + 1 + 1 + 1.
	if lb.Lower != 14 || lb.Feasible != 14 {
		t.Fatalf("lower %v, feasible %v, want 14, 14", lb.Lower, lb.Feasible)
	}
	if got := lb.LoadSeconds(&Result{Models: map[string]ModelResult{"a": {ColdLoads: 2}, "b": {ColdLoads: 3}}}); got != 23 {
		t.Fatalf("load seconds %v, want 23", got)
	}
	mixed := map[string]Model{"a": mk(16*gib, time.Second), "b": mk(8*gib, time.Second), "c": mk(8*gib, time.Second)}
	if cl, lb := BoxBounds(reqs, mixed, []uint64{24 * gib}); cl != nil || lb == nil || lb.Unit != 8*gib || lb.Lower > lb.Feasible {
		t.Fatalf("mixed sizes: %+v, %+v", cl, lb)
	}
	if cl, lb := BoxBounds(reqs, same, nil); cl != nil || lb != nil {
		t.Fatal("no devices: want no bounds")
	}
}

// A run is read against the load-time bound where there is one, else
// against Belady's cold loads, and JSON carries one ratio per run.
func TestReport_RatioToBound(t *testing.T) {
	run := &Result{ColdLoads: 6, Models: map[string]ModelResult{"a": {ColdLoads: 6}}}
	r := &Report{Runs: []*Result{run}, Bounds: &ColdLoads{Belady: 4}}
	if x, what, ok := r.RatioToBound(run); !ok || x != 1.5 || what != "cold loads" {
		t.Fatalf("Belady: %v %q %v", x, what, ok)
	}
	r.LoadBound = &LoadBound{Lower: 20, loadS: map[string]float64{"a": 5}}
	if x, what, ok := r.RatioToBound(run); !ok || x != 1.5 || what != "load s" {
		t.Fatalf("load bound: %v %q %v", x, what, ok)
	}
	var b strings.Builder
	if err := r.WriteJSON(&b); err != nil || !strings.Contains(b.String(), `"ratios_to_bound": [
    1.5
  ]`) {
		t.Fatalf("JSON %v:\n%s", err, b.String())
	}
	if _, _, ok := (&Report{}).RatioToBound(run); ok {
		t.Fatal("no bound: want no ratio")
	}
}
