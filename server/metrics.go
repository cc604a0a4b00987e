package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, on a registry of its own
// (no global state). Where a vLLM metric means the same thing it keeps
// vLLM's name and model_name label, so dashboards built for vLLM read a
// longhaul server too; HTTP-level metrics keep longhaul names.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	e2e          prometheus.Histogram
	promptTokens prometheus.Counter
	genTokens    prometheus.Counter
	running      prometheus.Gauge
	version      prometheus.Gauge
}

// latencyBuckets are request-latency histogram bounds in seconds.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(model string) *metrics {
	vllm := prometheus.Labels{"model_name": model}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "longhaul_server_requests_total", Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "longhaul_server_request_duration_seconds", Help: "HTTP request latency by endpoint.", Buckets: latencyBuckets,
		}, []string{"endpoint"}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", Help: "End-to-end latency of generation requests.",
			Buckets: latencyBuckets, ConstLabels: vllm,
		}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_total", Help: "Prompt tokens of generation requests.", ConstLabels: vllm,
		}),
		genTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:generation_tokens_total", Help: "Sampled tokens.", ConstLabels: vllm,
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:num_requests_running", Help: "Requests being served.", ConstLabels: vllm,
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "longhaul_server_weight_version", Help: "Served weight version.",
		}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.e2e, m.promptTokens, m.genTokens, m.running, m.version)
	return m
}

func (m *metrics) observe(endpoint string, code int, d time.Duration) {
	if code == 0 {
		code = 200 // a handler that wrote nothing answered 200
	}
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
	if code == 200 && (endpoint == "/v1/completions" || endpoint == "/v1/chat/completions") {
		m.e2e.Observe(d.Seconds())
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
