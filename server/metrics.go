package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the daemon's Prometheus series, on a registry of its own (no
// process-global state).
type metrics struct {
	reg         *prometheus.Registry
	invocations *prometheus.CounterVec
	phases      *prometheus.HistogramVec
	running     prometheus.Gauge
	requests    *prometheus.CounterVec
}

func newMetrics(queued func() int) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.invocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wovyr_invocations_total",
		Help: "Finished invocations by backend, error class (\"ok\" for a clean run) and outcome (done, failed, lost).",
	}, []string{"backend", "class", "outcome"})
	m.phases = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wovyr_phase_seconds",
		Help:    "Latency of each invocation phase: accept (request received to accepted: decode, validation, select, admission; the queued record commits beside the run, ADR 0044), queue (accepted to admitted), prepare (admitted to sandbox ready), run (started to finished), commit (the terminal record's commit), total (accepted to recorded), respond (terminal record committed to response written).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms … ~65 s
	}, []string{"backend", "phase"})
	m.running = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wovyr_running_invocations", Help: "Invocations admitted and not yet finished.",
	})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wovyr_http_requests_total", Help: "API requests by route and status code.",
	}, []string{"route", "code"})
	queueDepth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wovyr_queue_depth", Help: "Accepted invocations waiting for admission to start them.",
	}, func() float64 { return float64(queued()) })
	m.reg.MustRegister(m.invocations, m.phases, m.running, m.requests, queueDepth,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) phase(backend, phase string, d time.Duration) {
	if d >= 0 {
		m.phases.WithLabelValues(backend, phase).Observe(d.Seconds())
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
