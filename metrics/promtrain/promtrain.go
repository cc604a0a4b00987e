// Package promtrain is the Prometheus endpoint of a training run
// (`longhaul train --metrics-addr`): the step and every per-step value of
// metrics.jsonl, live in-flight rollouts and queue depths, per-server
// health and call latency, and the latency of run-log appends and
// checkpoints. It uses a registry of its own (no global state).
package promtrain

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/longhaul-rl/longhaul/metrics"
)

// Server health as the generator sees it.
type ServerHealth struct {
	URL      string
	Up       bool
	InFlight int
}

// Exporter holds the run's metrics.
type Exporter struct {
	reg      *prometheus.Registry
	mu       sync.Mutex
	perStep  map[string]prometheus.Gauge
	step     prometheus.Gauge
	steps    prometheus.Counter
	genTok   prometheus.Counter
	trainTok prometheus.Counter
	calls    *prometheus.HistogramVec
	callErrs *prometheus.CounterVec
	logLat   prometheus.Histogram
	ckptLat  prometheus.Histogram
}

// Buckets for latencies from a millisecond fsync to a minutes-long call.
var buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// New returns an exporter; maxSteps is run.max_steps.
func New(maxSteps int) *Exporter {
	e := &Exporter{
		reg:     prometheus.NewRegistry(),
		perStep: map[string]prometheus.Gauge{},
		step:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "longhaul_train_step", Help: "Last trained step."}),
		steps:   prometheus.NewCounter(prometheus.CounterOpts{Name: "longhaul_train_steps_total", Help: "Steps trained by this process."}),
		genTok: prometheus.NewCounter(prometheus.CounterOpts{Name: "longhaul_train_generated_tokens_total",
			Help: "Tokens sampled for the steps this process trained."}),
		trainTok: prometheus.NewCounter(prometheus.CounterOpts{Name: "longhaul_train_trained_tokens_total",
			Help: "Trainable tokens of the steps this process trained."}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "longhaul_generator_call_duration_seconds",
			Help: "Generation call latency by server.", Buckets: buckets}, []string{"server"}),
		callErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "longhaul_generator_call_errors_total",
			Help: "Failed generation calls by server."}, []string{"server"}),
		logLat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "longhaul_runlog_append_duration_seconds",
			Help: "Time until an append to the run log is durable (fsynced).", Buckets: buckets}),
		ckptLat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "longhaul_checkpoint_duration_seconds",
			Help: "Time to write a weight checkpoint.", Buckets: buckets}),
	}
	maxG := prometheus.NewGauge(prometheus.GaugeOpts{Name: "longhaul_train_max_steps", Help: "run.max_steps."})
	maxG.Set(float64(maxSteps))
	e.reg.MustRegister(e.step, e.steps, e.genTok, e.trainTok, e.calls, e.callErrs, e.logLat, e.ckptLat, maxG)
	for _, n := range metrics.Scalars(metrics.Step{}) {
		name := "longhaul_train_" + n.Tag[strings.IndexByte(n.Tag, '/')+1:]
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name,
			Help: fmt.Sprintf("Per-step %s of the last trained step (metrics.jsonl).", n.Tag)})
		e.perStep[n.Tag] = g
		e.reg.MustRegister(g)
	}
	return e
}

// Write implements metrics.Sink.
func (e *Exporter) Write(s metrics.Step) error {
	e.step.Set(float64(s.Step))
	e.steps.Inc()
	e.genTok.Add(float64(s.GeneratedTokens))
	e.trainTok.Add(float64(s.TrainTokens))
	for _, n := range metrics.Scalars(s) {
		e.perStep[n.Tag].Set(n.Value)
	}
	return nil
}

// Live registers gauges read at scrape time: rollouts in flight and the
// depth of named queues.
func (e *Exporter) Live(inFlight func() float64, queues map[string]func() float64) {
	e.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "longhaul_rollouts_in_flight",
		Help: "Rollouts running in this process now."}, inFlight))
	for name, f := range queues {
		e.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "longhaul_queue_depth",
			Help: "Items waiting in a queue.", ConstLabels: prometheus.Labels{"queue": name}}, f))
	}
}

// Servers registers per-server health, read at scrape time.
func (e *Exporter) Servers(status func() []ServerHealth) {
	e.reg.MustRegister(&serverCollector{status: status,
		up: prometheus.NewDesc("longhaul_generator_server_up", "1 when the server passed its last probe or call.", []string{"server"}, nil),
		inFlight: prometheus.NewDesc("longhaul_generator_server_in_flight", "Calls outstanding at the server.",
			[]string{"server"}, nil)})
}

// ObserveCall records one generation call.
func (e *Exporter) ObserveCall(server string, d time.Duration, err error) {
	e.calls.WithLabelValues(server).Observe(d.Seconds())
	if err != nil {
		e.callErrs.WithLabelValues(server).Inc()
	}
}

// ObserveLogAppend records one durable run-log append.
func (e *Exporter) ObserveLogAppend(d time.Duration) { e.logLat.Observe(d.Seconds()) }

// ObserveCheckpoint records one checkpoint write.
func (e *Exporter) ObserveCheckpoint(d time.Duration) { e.ckptLat.Observe(d.Seconds()) }

// Handler serves the metrics.
func (e *Exporter) Handler() http.Handler { return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}) }

type serverCollector struct {
	status       func() []ServerHealth
	up, inFlight *prometheus.Desc
}

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up; ch <- c.inFlight }

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.status() {
		up := 0.0
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, s.URL)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight), s.URL)
	}
}

// Serve listens on addr and serves /metrics until ctx ends. An address
// without a host ("":9464) binds to loopback: exposing a run's metrics
// beyond the machine is a choice the user spells out (0.0.0.0:9464).
func Serve(ctx context.Context, addr string, h http.Handler) (bound string, stop func(), err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Serve returns only once Close has closed the listener.
		_ = srv.Serve(ln)
	}()
	stopCtx := context.AfterFunc(ctx, func() { srv.Close() })
	return ln.Addr().String(), func() { stopCtx(); srv.Close(); <-done }, nil
}
