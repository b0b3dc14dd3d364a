package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the proxy's Prometheus series, on a registry of its own.
// Every model label is a catalog id: a request whose model is not in the
// catalog is counted in loadout_unrouted_requests_total, by status only,
// so label cardinality stays bounded by the catalog whatever clients send.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	unrouted   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	queueWait  *prometheus.HistogramVec
	inFlight   *prometheus.GaugeVec
	prompt     *prometheus.CounterVec
	completion *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	tps        *prometheus.HistogramVec
	mu         sync.RWMutex
	models     map[string]*modelMetrics // catalog ids (addModels); guarded by mu
	recent     recentWindow             // the last five minutes, for GET /api/summary
}

// modelMetrics are one model's series, resolved once so the hot path does
// not hash label values.
type modelMetrics struct {
	duration   prometheus.Observer
	queueWait  prometheus.Observer
	inFlight   prometheus.Gauge
	prompt     prometheus.Counter
	completion prometheus.Counter
	ttft       prometheus.Observer
	tps        prometheus.Observer
}

func newMetrics(ids []string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_requests_total",
			Help: "Requests to model endpoints, by model and HTTP status (499: the client left).",
		}, []string{"model", "code"}),
		unrouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_unrouted_requests_total",
			Help: "Requests to model endpoints that named no model of the catalog (or none readable), by HTTP status.",
		}, []string{"code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_request_duration_seconds",
			Help:    "Time from a model request's arrival to the end of its response, queueing and loading included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"model"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_queue_wait_seconds",
			Help:    "Time a granted request waited for its model (queue and load).",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"model"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadout_in_flight",
			Help: "Granted requests being proxied to the model right now.",
		}, []string{"model"}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_prompt_tokens_total",
			Help: "Prompt (input) tokens of successful responses, from their usage.",
		}, []string{"model"}),
		completion: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_completion_tokens_total",
			Help: "Completion (output) tokens of successful responses: their usage, or for a stream without one, its content chunks.",
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_time_to_first_token_seconds",
			Help:    "Time from sending a granted request to the model server to its first token (a stream's first content chunk, else the whole answer); queue and load wait excluded.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"model"}),
		tps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_generation_tokens_per_second",
			Help:    "Completion tokens per second of generation (after the first token, for streams), per successful response with at least two completion tokens.",
			Buckets: []float64{1, 2.5, 5, 10, 20, 40, 60, 80, 100, 150, 200, 400, 800, 1600},
		}, []string{"model"}),
		models: map[string]*modelMetrics{},
	}
	m.reg.MustRegister(m.requests, m.unrouted, m.duration, m.queueWait, m.inFlight,
		m.prompt, m.completion, m.ttft, m.tps,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.addModels(ids)
	return m
}

// addModels makes the series of catalog models that have none yet (at
// start, and when SetModels adds models); series of removed models stay.
func (m *metrics) addModels(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		if m.models[id] != nil {
			continue
		}
		m.models[id] = &modelMetrics{
			duration:   m.duration.WithLabelValues(id),
			queueWait:  m.queueWait.WithLabelValues(id),
			inFlight:   m.inFlight.WithLabelValues(id),
			prompt:     m.prompt.WithLabelValues(id),
			completion: m.completion.WithLabelValues(id),
			ttft:       m.ttft.WithLabelValues(id),
			tps:        m.tps.WithLabelValues(id),
		}
	}
}

// model returns a catalog model's series. Only the ids the catalog
// resolved reach it.
func (m *metrics) model(id string) *modelMetrics {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.models[id]
}

// observeRequest counts one ended model request and, for a successful
// one, the tokens and speeds its usage meter saw.
func (m *metrics) observeRequest(ex *exchange, status int, d time.Duration) {
	mm := m.model(ex.model)
	if mm == nil {
		m.unrouted.WithLabelValues(strconv.Itoa(status)).Inc()
		return
	}
	m.requests.WithLabelValues(ex.model, strconv.Itoa(status)).Inc()
	mm.duration.Observe(d.Seconds())
	u := ex.usage
	if u == nil || status != 200 {
		m.recent.add(time.Now(), status, 0)
		return
	}
	m.recent.add(time.Now(), status, u.completion)
	mm.prompt.Add(float64(u.prompt))
	mm.completion.Add(float64(u.completion))
	if ttft, ok := u.ttft(); ok {
		mm.ttft.Observe(ttft.Seconds())
	}
	if tps, ok := u.tokensPerSecond(); ok {
		mm.tps.Observe(tps)
	}
}
