package observe

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
