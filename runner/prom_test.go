package runner

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/metrics/promtrain"
)

func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	return fams
}

// TestPrometheusDuringTraining: a run with the exporter serves, parsed by
// the Prometheus text parser, the step and per-step values equal to
// metrics.jsonl, and latency histograms that saw real log appends,
// checkpoints and generation calls.
func TestPrometheusDuringTraining(t *testing.T) {
	dir := t.TempDir()
	cfg := tiny(t, "run.max_steps=2")
	obs := promtrain.New(cfg.Run.MaxSteps)
	addr, stop, err := promtrain.Serve(context.Background(), "127.0.0.1:0", obs.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := Train(context.Background(), cfg, Options{RunDir: dir, Observe: obs}); err != nil {
		t.Fatal(err)
	}
	steps, err := metrics.Read(filepath.Join(dir, MetricsFile))
	if err != nil || len(steps) != 2 {
		t.Fatalf("metrics: %d rows, %v", len(steps), err)
	}
	last := steps[1]
	fams := scrape(t, addr)
	value := func(name string, labels ...string) float64 {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("no family %s", name)
		}
		for _, m := range f.GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				ok = ok && found
			}
			if !ok {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("%s%v: no such series", name, labels)
		return 0
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"longhaul_train_step", 2},
		{"longhaul_train_max_steps", 2},
		{"longhaul_train_steps_total", 2},
		{"longhaul_train_reward_mean", last.RewardMean},
		{"longhaul_train_success_rate", last.SuccessRate},
		{"longhaul_train_loss", last.Loss},
		{"longhaul_train_entropy", last.Entropy},
		{"longhaul_train_gen_tokens_per_s", last.GenTokensPerSecond},
		{"longhaul_train_generated_tokens_total", float64(steps[0].GeneratedTokens + last.GeneratedTokens)},
		{"longhaul_rollouts_in_flight", 0},
	} {
		if got := value(c.name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if value("longhaul_queue_depth", "queue", "generate") != 0 {
		t.Error("generation queue not empty after the run")
	}
	for _, h := range []struct {
		name   string
		labels []string
	}{
		{"longhaul_runlog_append_duration_seconds", nil},
		{"longhaul_checkpoint_duration_seconds", nil},
		{"longhaul_generator_call_duration_seconds", []string{"server", "embedded"}},
	} {
		if n := value(h.name, h.labels...); n == 0 {
			t.Errorf("%s%v observed nothing", h.name, h.labels)
		}
	}
}
