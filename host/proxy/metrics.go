package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loadout-dev/loadout/host/peers"
)

// metrics are the proxy's Prometheus series, on a registry of its own,
// named by Prometheus's naming rules (base units, a unit suffix, _total
// on counters). Every model label is a catalog id: a request whose model
// is not in the catalog is counted in loadout_unrouted_requests_total, by
// status only, so label cardinality stays bounded by the catalog whatever
// clients send. Every peer label is a configured peer's id.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	unrouted     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	queueWait    *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	prompt       *prometheus.CounterVec
	completion   *prometheus.CounterVec
	ttft         *prometheus.HistogramVec
	upstreamTTFT *prometheus.HistogramVec
	tps          *prometheus.HistogramVec
	peerDuration *prometheus.HistogramVec
	mu           sync.RWMutex
	models       map[string]*modelMetrics // catalog ids (addModels); guarded by mu
	recent       recentWindow             // the last five minutes, for GET /api/summary
}

// modelMetrics are one model's series, resolved once so the hot path does
// not hash label values.
type modelMetrics struct {
	duration     prometheus.Observer
	queueWait    prometheus.Observer
	inFlight     prometheus.Gauge
	prompt       prometheus.Counter
	completion   prometheus.Counter
	ttft         prometheus.Observer
	upstreamTTFT prometheus.Observer
	tps          prometheus.Observer
}

// ttftBuckets are the bounds, in seconds, of both TTFT histograms.
var ttftBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// newMetrics makes the proxy's series on a new registry, with the Go
// runtime's and the process's, and the per-model series of ids.
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
			Name: "loadout_in_flight_requests",
			Help: "Granted requests being proxied to the model (or forwarded to the peer) right now.",
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
			Help:    "Time from a successful model request's arrival to its first token (a stream's first content chunk, else the first byte of the answer): queue and load wait included, as a client and loadout simulate see it.",
			Buckets: ttftBuckets,
		}, []string{"model"}),
		upstreamTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_upstream_time_to_first_token_seconds",
			Help:    "Time from sending a successful request to its upstream (the model server, once granted, or the peer) to its first token; queue and load wait excluded.",
			Buckets: ttftBuckets,
		}, []string{"model"}),
		tps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_generation_tokens_per_second",
			Help:    "Completion tokens per second of generation (after the first token, for streams), per successful response with at least two completion tokens.",
			Buckets: []float64{1, 2.5, 5, 10, 20, 40, 60, 80, 100, 150, 200, 400, 800, 1600},
		}, []string{"model"}),
		peerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_peer_request_duration_seconds",
			Help:    "Time from forwarding a model request to the peer to the end of its response, by peer and HTTP status (499: the client left).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"peer", "code"}),
		models: map[string]*modelMetrics{},
	}
	m.reg.MustRegister(m.requests, m.unrouted, m.duration, m.queueWait, m.inFlight,
		m.prompt, m.completion, m.ttft, m.upstreamTTFT, m.tps, m.peerDuration,
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
			duration:     m.duration.WithLabelValues(id),
			queueWait:    m.queueWait.WithLabelValues(id),
			inFlight:     m.inFlight.WithLabelValues(id),
			prompt:       m.prompt.WithLabelValues(id),
			completion:   m.completion.WithLabelValues(id),
			ttft:         m.ttft.WithLabelValues(id),
			upstreamTTFT: m.upstreamTTFT.WithLabelValues(id),
			tps:          m.tps.WithLabelValues(id),
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
// one, the tokens and speeds its usage meter saw. d is the time since its
// arrival (ex.start).
func (m *metrics) observeRequest(ex *exchange, status int, d time.Duration) {
	mm := m.model(ex.model)
	if mm == nil {
		m.unrouted.WithLabelValues(strconv.Itoa(status)).Inc()
		return
	}
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(ex.model, code).Inc()
	mm.duration.Observe(d.Seconds())
	u := ex.usage
	if ex.peer != nil && u != nil {
		m.peerDuration.WithLabelValues(ex.peer.Peer(), code).Observe(time.Since(u.sent).Seconds())
	}
	if u == nil || status != 200 {
		m.recent.add(time.Now(), status, 0)
		return
	}
	m.recent.add(time.Now(), status, u.completion)
	mm.prompt.Add(float64(u.prompt))
	mm.completion.Add(float64(u.completion))
	if t, ok := u.ttft(ex.start); ok {
		mm.ttft.Observe(t.Seconds())
	}
	if t, ok := u.upstreamTTFT(); ok {
		mm.upstreamTTFT.Observe(t.Seconds())
	}
	if tps, ok := u.tokensPerSecond(); ok {
		mm.tps.Observe(tps)
	}
}

// peerUp is loadout_peer_up, Prometheus's `up` for peers: 1 while the
// peer's health (host/peers) is up, 0 while it is down. A peer not yet
// checked has no sample: its health is unknown, and a sample would say
// something that was not measured.
var peerUp = prometheus.NewDesc("loadout_peer_up",
	"1 while the peer (llama-swap's peers:) answers its health checks and forwarded requests, 0 while it is down; no sample before its first check.",
	[]string{"peer"}, nil)

// peerCollector reads the peers' health from host/peers (Set.Statuses) at
// scrape time: the state lives there, once.
type peerCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c peerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- peerUp }

// Collect implements prometheus.Collector.
func (c peerCollector) Collect(ch chan<- prometheus.Metric) {
	set := c.s.peers.Load()
	if set == nil {
		return
	}
	for _, st := range set.Statuses() {
		switch st.State {
		case peers.Up:
			ch <- prometheus.MustNewConstMetric(peerUp, prometheus.GaugeValue, 1, st.Peer)
		case peers.Down:
			ch <- prometheus.MustNewConstMetric(peerUp, prometheus.GaugeValue, 0, st.Peer)
		}
	}
}
