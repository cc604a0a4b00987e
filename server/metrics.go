package server

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The Prometheus text format is written by hand: four metric families do
// not justify client_golang's 30 modules.

// latencyBuckets are request-latency histogram bounds in seconds.
var latencyBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type endpointStats struct {
	codes   map[int]int64
	buckets [len(latencyBuckets)]int64 // non-cumulative counts
	count   int64
	sum     float64
}

type metrics struct {
	mu           sync.Mutex
	endpoints    map[string]*endpointStats
	promptTokens atomic.Int64
	genTokens    atomic.Int64
	inFlight     atomic.Int64
	version      atomic.Int64
}

func newMetrics() *metrics { return &metrics{endpoints: map[string]*endpointStats{}} }

func (m *metrics) observe(endpoint string, code int, d time.Duration) {
	if code == 0 {
		code = 200 // a handler that wrote nothing answered 200
	}
	sec := d.Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.endpoints[endpoint]
	if e == nil {
		e = &endpointStats{codes: map[int]int64{}}
		m.endpoints[endpoint] = e
	}
	e.codes[code]++
	e.count++
	e.sum += sec
	for i, b := range latencyBuckets {
		if sec <= b {
			e.buckets[i]++
			break
		}
	}
}

func (m *metrics) write(w io.Writer) {
	m.mu.Lock()
	names := make([]string, 0, len(m.endpoints))
	for n := range m.endpoints {
		names = append(names, n)
	}
	slices.Sort(names)
	var b []byte
	b = append(b, "# HELP longhaul_server_requests_total HTTP requests by endpoint and status code.\n"+
		"# TYPE longhaul_server_requests_total counter\n"...)
	for _, n := range names {
		e := m.endpoints[n]
		codes := make([]int, 0, len(e.codes))
		for c := range e.codes {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			b = fmt.Appendf(b, "longhaul_server_requests_total{endpoint=%q,code=\"%d\"} %d\n", n, c, e.codes[c])
		}
	}
	b = append(b, "# HELP longhaul_server_request_duration_seconds HTTP request latency.\n"+
		"# TYPE longhaul_server_request_duration_seconds histogram\n"...)
	for _, n := range names {
		e := m.endpoints[n]
		var cum int64
		for i, le := range latencyBuckets {
			cum += e.buckets[i]
			b = fmt.Appendf(b, "longhaul_server_request_duration_seconds_bucket{endpoint=%q,le=%q} %d\n", n,
				strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		b = fmt.Appendf(b, "longhaul_server_request_duration_seconds_bucket{endpoint=%q,le=\"+Inf\"} %d\n", n, e.count)
		b = fmt.Appendf(b, "longhaul_server_request_duration_seconds_sum{endpoint=%q} %s\n", n,
			strconv.FormatFloat(e.sum, 'g', -1, 64))
		b = fmt.Appendf(b, "longhaul_server_request_duration_seconds_count{endpoint=%q} %d\n", n, e.count)
	}
	m.mu.Unlock()
	b = fmt.Appendf(b, "# HELP longhaul_server_prompt_tokens_total Prompt tokens of generation requests.\n"+
		"# TYPE longhaul_server_prompt_tokens_total counter\nlonghaul_server_prompt_tokens_total %d\n", m.promptTokens.Load())
	b = fmt.Appendf(b, "# HELP longhaul_server_generation_tokens_total Sampled tokens.\n"+
		"# TYPE longhaul_server_generation_tokens_total counter\nlonghaul_server_generation_tokens_total %d\n", m.genTokens.Load())
	b = fmt.Appendf(b, "# HELP longhaul_server_requests_in_flight Requests being served.\n"+
		"# TYPE longhaul_server_requests_in_flight gauge\nlonghaul_server_requests_in_flight %d\n", m.inFlight.Load())
	b = fmt.Appendf(b, "# HELP longhaul_server_weight_version Served weight version.\n"+
		"# TYPE longhaul_server_weight_version gauge\nlonghaul_server_weight_version %d\n", m.version.Load())
	_, _ = w.Write(b)
}
