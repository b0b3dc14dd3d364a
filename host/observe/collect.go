package observe

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
)

// The per-device series. Every one is labelled gpu, the device's index
// (NVML's, in PCI bus order, or its place in the config's gpus: list), so
// that loadout_gpu_info joins onto any of them: an info series, value 1,
// carries the names (Prometheus's info-metric pattern, as in
// node_uname_info), so no other series repeats them.
var (
	gpuInfo = prometheus.NewDesc("loadout_gpu_info",
		"1 for each GPU, labelled with its product name (NVML, or the config's declared name) and its NVML UUID (empty for a declared device).", []string{"gpu", "name", "uuid"}, nil)
	gpuTotal = prometheus.NewDesc("loadout_gpu_memory_total_bytes",
		"The device's memory (NVML, or the config's declared size).", []string{"gpu"}, nil)
	gpuUsed = prometheus.NewDesc("loadout_gpu_memory_used_bytes",
		"Memory the driver reports in use (total minus the driver's free figure).", []string{"gpu"}, nil)
	gpuFree = prometheus.NewDesc("loadout_gpu_memory_free_bytes",
		"Memory a new lease can take: the smaller of the driver's free figure and total minus leases minus margin.", []string{"gpu"}, nil)
	gpuLeased = prometheus.NewDesc("loadout_gpu_leased_bytes",
		"Memory leased on the device, by holder kind (model, job).", []string{"gpu", "holder"}, nil)
	gpuLeaseHolders = prometheus.NewDesc("loadout_gpu_model_leased_bytes",
		"Memory a configured model's lease holds on the device.", []string{"gpu", "model"}, nil)
	gpuUtilization = prometheus.NewDesc("loadout_gpu_utilization_ratio",
		"The share of the driver's last sample period in which a kernel ran (NVML), 0–1; no sample where the driver reports none (a declared device).", []string{"gpu"}, nil)
)

// DeviceCollector reads the ledger at scrape time: per device, memory
// total, used and free, and the leased bytes by holder kind and by model.
// The holder kind is the ledger's (a job's whole-device lease, or a model's).
type DeviceCollector struct {
	ledger *gpu.Ledger
	models map[string]bool
}

// NewDeviceCollector collects ledger's devices; models are the configured
// model ids (every other lease owner is a job).
func NewDeviceCollector(ledger *gpu.Ledger, models []string) *DeviceCollector {
	c := &DeviceCollector{ledger: ledger, models: map[string]bool{}}
	for _, m := range models {
		c.models[m] = true
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *DeviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gpuInfo, gpuTotal, gpuUsed, gpuFree, gpuLeased, gpuLeaseHolders, gpuUtilization} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *DeviceCollector) Collect(ch chan<- prometheus.Metric) {
	devices, err := c.ledger.Leases()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(gpuTotal, err)
		return
	}
	for _, d := range devices {
		idx := strconv.Itoa(d.Index)
		ch <- prometheus.MustNewConstMetric(gpuInfo, prometheus.GaugeValue, 1, idx, d.Name, d.UUID)
		ch <- prometheus.MustNewConstMetric(gpuTotal, prometheus.GaugeValue, float64(d.Total), idx)
		ch <- prometheus.MustNewConstMetric(gpuUsed, prometheus.GaugeValue, float64(d.Total-min(d.Total, d.DriverFree)), idx)
		ch <- prometheus.MustNewConstMetric(gpuFree, prometheus.GaugeValue, float64(d.Free), idx)
		if d.Utilization != nil {
			ch <- prometheus.MustNewConstMetric(gpuUtilization, prometheus.GaugeValue, float64(*d.Utilization)/100, idx)
		}
		var byKind [2]uint64
		byModel := map[string]uint64{}
		for _, h := range d.Holders {
			if h.Kind == gpu.HolderJob {
				byKind[1] += h.Bytes
				continue
			}
			byKind[0] += h.Bytes
			if m := config.ModelOf(h.Owner); c.models[m] { // labels bounded to the configured models; a replica's lease is its model's
				byModel[m] += h.Bytes
			}
		}
		for m, bytes := range byModel {
			ch <- prometheus.MustNewConstMetric(gpuLeaseHolders, prometheus.GaugeValue, float64(bytes), idx, m)
		}
		ch <- prometheus.MustNewConstMetric(gpuLeased, prometheus.GaugeValue, float64(byKind[0]), idx, gpu.HolderModel)
		ch <- prometheus.MustNewConstMetric(gpuLeased, prometheus.GaugeValue, float64(byKind[1]), idx, gpu.HolderJob)
	}
}

// PolicyStat is one loaded policy as the policy collector reports it.
type PolicyStat struct {
	Role     string // "scheduler" or "swapper"
	Name     string // e.g. "builtin:fifo"
	Healthy  bool
	Active   bool
	Fallback bool
	Crashes  int
	// Refused is the router's refused-effects count for the role (the
	// same figure on each policy of the role).
	Refused int
	// Calls are the policy's calls per event export.
	Calls []PolicyCalls
}

// PolicyCalls is one event export's calls into a policy: a counter and a
// latency histogram, kept by the policy's supervisor.
type PolicyCalls struct {
	Event   string  // e.g. "on_request", "plan"
	Count   uint64  // calls
	Seconds float64 // their total duration
	// Bounds are the histogram's upper bounds in seconds; Buckets[i] counts
	// the calls in (Bounds[i-1], Bounds[i]] (not cumulative).
	Bounds  []float64
	Buckets []uint64
}

var (
	policyCrashes = prometheus.NewDesc("loadout_policy_crashes_total",
		"Crashes of the policy since it was loaded (failed re-instantiations included).", []string{"role", "policy"}, nil)
	policyHealthy = prometheus.NewDesc("loadout_policy_healthy",
		"1 while the policy is healthy, 0 once disabled for crashing.", []string{"role", "policy"}, nil)
	policyActive = prometheus.NewDesc("loadout_policy_active",
		"1 for the policy answering for its role now (the configured one, or its fallback).", []string{"role", "policy", "fallback"}, nil)
	policyRefused = prometheus.NewDesc("loadout_policy_refused_effects_total",
		"Effects calls of the role's policy the router refused (unknown id, busy eviction, …).", []string{"role"}, nil)
	policyCalls = prometheus.NewDesc("loadout_policy_calls_total",
		"Calls into the policy by event export (failed and crashed calls included), since it was loaded.", []string{"role", "policy", "event"}, nil)
	policyCallSeconds = prometheus.NewDesc("loadout_policy_call_seconds",
		"How long calls into the policy took, by event export.", []string{"role", "policy", "event"}, nil)
)

// PolicyCollector reports the policies' health at scrape time from stats,
// which the binary reads on the run loop.
type PolicyCollector struct{ stats func() []PolicyStat }

// NewPolicyCollector collects what stats returns at each scrape.
func NewPolicyCollector(stats func() []PolicyStat) *PolicyCollector {
	return &PolicyCollector{stats: stats}
}

// Describe implements prometheus.Collector.
func (c *PolicyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{policyCrashes, policyHealthy, policyActive, policyRefused, policyCalls, policyCallSeconds} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PolicyCollector) Collect(ch chan<- prometheus.Metric) {
	refused := map[string]int{}
	for _, s := range c.stats() {
		ch <- prometheus.MustNewConstMetric(policyCrashes, prometheus.CounterValue, float64(s.Crashes), s.Role, s.Name)
		ch <- prometheus.MustNewConstMetric(policyHealthy, prometheus.GaugeValue, boolFloat(s.Healthy), s.Role, s.Name)
		ch <- prometheus.MustNewConstMetric(policyActive, prometheus.GaugeValue, boolFloat(s.Active), s.Role, s.Name, strconv.FormatBool(s.Fallback))
		refused[s.Role] = s.Refused
		for _, c := range s.Calls {
			ch <- prometheus.MustNewConstMetric(policyCalls, prometheus.CounterValue, float64(c.Count), s.Role, s.Name, c.Event)
			buckets := make(map[float64]uint64, len(c.Bounds))
			var cum uint64
			for i, le := range c.Bounds {
				cum += c.Buckets[i]
				buckets[le] = cum
			}
			ch <- prometheus.MustNewConstHistogram(policyCallSeconds, c.Count, c.Seconds, buckets, s.Role, s.Name, c.Event)
		}
	}
	for role, n := range refused {
		ch <- prometheus.MustNewConstMetric(policyRefused, prometheus.CounterValue, float64(n), role)
	}
}
