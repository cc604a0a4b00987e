package pytorch

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/model"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
	"github.com/longhaul-rl/longhaul/train/remote"
)

// serverTimes reads what the trainer reports about its last step: the
// seconds it spent decoding the payload and in the step itself.
func serverTimes(b *testing.B, url string) (decode, step float64) {
	resp, err := http.Get(url + "/v1/state")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Decode float64 `json:"last_decode_seconds"`
		Step   float64 `json:"last_step_seconds"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		b.Fatal(err)
	}
	return s.Decode, s.Step
}

// BenchmarkTrainStepOverhead: one train_step of 64 rows × 512 tokens through
// train/remote's client; overhead-% is everything but the step itself
// (encode, HTTP, decode, answer) as a share of the client's wall time.
// go test -run '^$' -bench TrainStepOverhead -benchtime 3x ./test/pytorch
func BenchmarkTrainStepOverhead(b *testing.B) {
	tb := testing.TB(b)
	p := start(b, tinyModel(b)).url
	c := remote.New(p, remote.Options{})
	bt := batch(1, 64, 512, 512, vocab)
	ctx := context.Background()
	if _, err := c.TrainStep(ctx, bt); err != nil { // warm-up
		tb.Fatal(err)
	}
	var wall, stepS float64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := c.TrainStep(ctx, bt); err != nil {
			tb.Fatal(err)
		}
		wall += time.Since(t0).Seconds()
		_, s := serverTimes(b, p)
		stepS += s
	}
	b.ReportMetric(stepS/float64(b.N), "torch-step-s")
	b.ReportMetric(100*(wall-stepS)/wall, "overhead-%")
}

// BenchmarkStepGoVsTorch: the same batch (16 rows × 64 tokens) on the same
// tiny model in the Go trainer (in process) and the PyTorch trainer (its
// own step time, HTTP excluded); torch/go is the ratio of step times.
func BenchmarkStepGoVsTorch(b *testing.B) {
	cfg := model.DefaultConfig()
	cfg.Vocab = vocab
	m, err := model.NewBuiltin(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	hf := goToHF(b, m, b.TempDir())
	p := start(b, hf, "--impl", "builtin").url
	c := remote.New(p, remote.Options{})
	goT, err := tembedded.New(m, model.DefaultOptimConfig(), model.LossConfig{})
	if err != nil {
		b.Fatal(err)
	}
	bt := batch(2, 16, 64, 64, vocab)
	ctx := context.Background()
	var goS, torchS float64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := goT.TrainStep(ctx, bt); err != nil {
			b.Fatal(err)
		}
		goS += time.Since(t0).Seconds()
		if _, err := c.TrainStep(ctx, bt); err != nil {
			b.Fatal(err)
		}
		_, s := serverTimes(b, p)
		torchS += s
	}
	b.ReportMetric(goS/float64(b.N), "go-step-s")
	b.ReportMetric(torchS/float64(b.N), "torch-step-s")
	b.ReportMetric(torchS/goS, "torch/go")
}
