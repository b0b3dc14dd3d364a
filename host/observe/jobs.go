package observe

import "github.com/prometheus/client_golang/prometheus"

var jobsByState = prometheus.NewDesc("loadout_jobs",
	"Jobs (tasks of the job queue) in each state.", []string{"state"}, nil)

// JobCollector reports the job queue's tasks by state at scrape time.
type JobCollector struct {
	states []string
	counts func() (map[string]int, error)
}

// NewJobCollector collects what counts returns at each scrape; every one
// of states is reported, 0 when counts has no entry for it.
func NewJobCollector(states []string, counts func() (map[string]int, error)) *JobCollector {
	return &JobCollector{states: states, counts: counts}
}

// Describe implements prometheus.Collector.
func (c *JobCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobsByState }

// Collect implements prometheus.Collector.
func (c *JobCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.counts()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(jobsByState, err)
		return
	}
	for _, st := range c.states {
		ch <- prometheus.MustNewConstMetric(jobsByState, prometheus.GaugeValue, float64(counts[st]), st)
	}
}
