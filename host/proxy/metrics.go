package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// unknownModel is the model label of requests whose model is not in the
// catalog (or not known yet when they failed), so label cardinality stays
// bounded by the catalog whatever clients send.
const unknownModel = "unknown"

// metrics are the proxy's Prometheus series, on a registry of its own.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	queueWait *prometheus.HistogramVec
	inFlight  *prometheus.GaugeVec
	models    map[string]*modelMetrics // catalog ids and unknownModel; read-only after newMetrics
}

// modelMetrics are one model's series, resolved once so the hot path does
// not hash label values.
type modelMetrics struct {
	duration  prometheus.Observer
	queueWait prometheus.Observer
	inFlight  prometheus.Gauge
}

func newMetrics(ids []string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_requests_total",
			Help: "Requests to model endpoints, by model and HTTP status (499: the client left).",
		}, []string{"model", "code"}),
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
		models: map[string]*modelMetrics{},
	}
	m.reg.MustRegister(m.requests, m.duration, m.queueWait, m.inFlight,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, id := range append(ids, unknownModel) {
		m.models[id] = &modelMetrics{
			duration:  m.duration.WithLabelValues(id),
			queueWait: m.queueWait.WithLabelValues(id),
			inFlight:  m.inFlight.WithLabelValues(id),
		}
	}
	return m
}

// model returns a model's series; unknownModel's for anything else.
func (m *metrics) model(id string) *modelMetrics {
	if mm, ok := m.models[id]; ok {
		return mm
	}
	return m.models[unknownModel]
}

func (m *metrics) observeRequest(id string, status int, d time.Duration) {
	if _, ok := m.models[id]; !ok {
		id = unknownModel
	}
	m.requests.WithLabelValues(id, strconv.Itoa(status)).Inc()
	m.model(id).duration.Observe(d.Seconds())
}
