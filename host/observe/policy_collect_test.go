package observe

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPolicyCollector_CallsAndLatency: a policy's calls become
// loadout_policy_calls_total and a cumulative loadout_policy_call_seconds
// histogram per event.
func TestPolicyCollector_CallsAndLatency(t *testing.T) {
	c := NewPolicyCollector(func() []PolicyStat {
		return []PolicyStat{{Role: "scheduler", Name: "builtin:fifo", Healthy: true, Active: true, Calls: []PolicyCalls{
			{Event: "on_request", Count: 4, Seconds: 0.5, Bounds: []float64{0.001, 0.1}, Buckets: []uint64{1, 2}},
		}}}
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var calls float64
	var count uint64
	var sum float64
	cum := map[float64]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["event"] != "on_request" || labels["policy"] != "builtin:fifo" || labels["role"] != "scheduler" {
				continue
			}
			switch mf.GetName() {
			case "loadout_policy_calls_total":
				calls = m.GetCounter().GetValue()
			case "loadout_policy_call_seconds":
				h := m.GetHistogram()
				count, sum = h.GetSampleCount(), h.GetSampleSum()
				for _, b := range h.GetBucket() {
					cum[b.GetUpperBound()] = b.GetCumulativeCount()
				}
			}
		}
	}
	if calls != 4 || count != 4 || sum != 0.5 || cum[0.001] != 1 || cum[0.1] != 3 {
		t.Fatalf("calls %v, histogram count %d sum %v buckets %v; want 4 calls, 4 in 0.5 s, {0.001:1, 0.1:3}", calls, count, sum, cum)
	}
}

// loadout_policy_failures_total is counted by role and by the policy that
// failed; AddPolicy makes a policy's series at 0 before its first failure.
func TestObserver_PolicyFailuresByPolicy(t *testing.T) {
	o := New(nil, nil)
	o.AddPolicy("scheduler", "builtin:fifo")
	o.AddPolicy("swapper", "custom.wasm")
	o.PolicyFailed("swapper", "custom.wasm", "plan", errors.New("policy custom.wasm crashed in plan: out of memory"))
	o.PolicyFailed("swapper", "builtin:group", "plan", errors.New("the fallback failed too"))
	reg := prometheus.NewRegistry()
	if err := o.Register(reg); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP loadout_policy_failures_total Policy calls that returned an error (crash, deadline, disabled), by role and by the policy that failed.
# TYPE loadout_policy_failures_total counter
loadout_policy_failures_total{policy="builtin:fifo",role="scheduler"} 0
loadout_policy_failures_total{policy="builtin:group",role="swapper"} 1
loadout_policy_failures_total{policy="custom.wasm",role="swapper"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loadout_policy_failures_total"); err != nil {
		t.Fatal(err)
	}
}

// Each configured model's eviction series exist at 0 for every reason
// before its first eviction, so increase() over them counts it.
func TestObserver_EvictionSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := New([]string{"m"}, nil).Register(reg); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "loadout_model_evictions_total")
	if err != nil || n != len(reasons) {
		t.Fatalf("eviction series of a model never evicted: %d (%v), want one per reason (%d)", n, err, len(reasons))
	}
}
