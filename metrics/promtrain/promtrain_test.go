package promtrain

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/longhaul-rl/longhaul/metrics"
)

func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func series(f *dto.MetricFamily, server string) *dto.Metric {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "server" && l.GetValue() == server {
				return m
			}
		}
	}
	return nil
}

// TestExporter: per-server health and latency, live gauges and the step
// row, served on loopback when the address names no host, parsed by the
// Prometheus text parser.
func TestExporter(t *testing.T) {
	e := New(50)
	up := true
	e.Servers(func() []ServerHealth {
		return []ServerHealth{{URL: "http://a", Up: up, InFlight: 3}, {URL: "http://b", Up: false}}
	})
	inFlight := 12.0
	e.Live(func() float64 { return inFlight }, map[string]func() float64{"generate": func() float64 { return 4 }})
	e.ObserveCall("http://a", 30*time.Millisecond, nil)
	e.ObserveCall("http://a", 2*time.Second, errors.New("503"))
	e.ObserveLogAppend(time.Millisecond)
	e.ObserveCheckpoint(time.Second)
	e.Write(metrics.Step{Step: 7, RewardMean: 0.25, GeneratedTokens: 100})
	addr, stop, err := Serve(context.Background(), ":0", e.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("bound %s, want loopback", addr)
	}
	fams := scrape(t, addr)
	g := func(name string) float64 { return fams[name].GetMetric()[0].GetGauge().GetValue() }
	if g("longhaul_train_step") != 7 || g("longhaul_train_reward_mean") != 0.25 || g("longhaul_rollouts_in_flight") != 12 ||
		g("longhaul_queue_depth") != 4 || g("longhaul_train_max_steps") != 50 {
		t.Fatalf("gauges: step %v reward %v in flight %v queue %v", g("longhaul_train_step"), g("longhaul_train_reward_mean"),
			g("longhaul_rollouts_in_flight"), g("longhaul_queue_depth"))
	}
	if v := series(fams["longhaul_generator_server_up"], "http://a").GetGauge().GetValue(); v != 1 {
		t.Fatalf("server a up = %v", v)
	}
	if v := series(fams["longhaul_generator_server_up"], "http://b").GetGauge().GetValue(); v != 0 {
		t.Fatalf("server b up = %v", v)
	}
	h := series(fams["longhaul_generator_call_duration_seconds"], "http://a").GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 2.02 || h.GetSampleSum() > 2.04 {
		t.Fatalf("call histogram: %d samples, sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if v := series(fams["longhaul_generator_call_errors_total"], "http://a").GetCounter().GetValue(); v != 1 {
		t.Fatalf("errors = %v", v)
	}
	// live values are read at scrape time
	inFlight, up = 2, false
	fams = scrape(t, addr)
	if g("longhaul_rollouts_in_flight") != 2 || series(fams["longhaul_generator_server_up"], "http://a").GetGauge().GetValue() != 0 {
		t.Fatal("live gauges not read at scrape time")
	}
}
