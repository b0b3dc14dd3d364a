package observe

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// jobGauges scrapes c once: loadout_jobs by state.
func jobGauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "loadout_jobs" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestJobCollector_EveryStateAtScrapeTime(t *testing.T) {
	counts := map[string]int{"RUNNING": 2}
	c := NewJobCollector([]string{"QUEUED", "RUNNING"}, func() (map[string]int, error) { return counts, nil })
	if got, want := jobGauges(t, c), map[string]float64{"QUEUED": 0, "RUNNING": 2}; !maps.Equal(got, want) {
		t.Fatalf("first scrape %v, want %v", got, want)
	}
	counts = map[string]int{"QUEUED": 1}
	if got, want := jobGauges(t, c), map[string]float64{"QUEUED": 1, "RUNNING": 0}; !maps.Equal(got, want) {
		t.Fatalf("second scrape %v, want %v", got, want)
	}
}

func TestJobCollector_StoreErrorIsAScrapeError(t *testing.T) {
	c := NewJobCollector([]string{"QUEUED"}, func() (map[string]int, error) { return nil, errors.New("disk gone") })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "disk gone") {
		t.Fatalf("gather: %v, want the store's error", err)
	}
}
