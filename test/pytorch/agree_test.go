package pytorch

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/model"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
	"github.com/longhaul-rl/longhaul/train/remote"
)

// TestGoAgreement: the Go trainer (train/embedded over model/, the
// built-in configuration) and the PyTorch trainer take the same batches
// from the same weights (the built-in model is a Llama configuration, saved
// as an HF directory); loss and grad norm agree to 1e-5 relative at every
// step, and so do the weights after three steps (per tensor, relative to
// its largest entry). AdamW's eps is
// 1e-3 here: with 1e-8 the first update is lr·sign(g), which turns float32
// rounding in a near-zero gradient entry into a full ±lr difference.
func TestGoAgreement(t *testing.T) {
	t.Parallel()
	python(t)
	root := t.TempDir()
	cfg := model.DefaultConfig()
	cfg.Vocab, cfg.Dim, cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.Hidden, cfg.MaxPos = vocab, 32, 4, 4, 8, 64, 64
	m, err := model.NewBuiltin(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	hf := goToHF(t, m, root)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a bound for a hung run only (under load this test took nearly 4 minutes)
	defer cancel()
	oc := model.OptimConfig{LR: 0.01, MinLR: 0.001, WarmupSteps: 2, TotalSteps: 100, Schedule: "cosine",
		WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-3, GradClip: 0.5}
	lc := model.LossConfig{ClipLow: 0.2, ClipHigh: 0.28, Norm: model.NormTokenMean}
	goT, err := tembedded.New(m, oc, lc)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, hf, "--impl", "builtin", "--lr", "0.01", "--min-lr", "0.001", "--warmup-steps", "2", "--total-steps", "100",
		"--schedule", "cosine", "--weight-decay", "0.1", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-3", "--grad-clip", "0.5",
		"--clip-low", "0.2", "--clip-high", "0.28", "--norm", "token_mean")
	py := remote.New(p.url, remote.Options{})
	for k := range 3 {
		b := batch(uint64(400+k), 5, 8, 40, vocab)
		gs, err := goT.TrainStep(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := py.TrainStep(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss go %.9g torch %.9g (rel %.2g); grad norm go %.9g torch %.9g (rel %.2g); clip %v/%v",
			k+1, gs.Loss, ps.Loss, relDiff(gs.Loss, ps.Loss), gs.GradNorm, ps.GradNorm, relDiff(gs.GradNorm, ps.GradNorm), gs.ClipFrac, ps.ClipFrac)
		if relDiff(gs.Loss, ps.Loss) > 1e-5 || relDiff(gs.GradNorm, ps.GradNorm) > 1e-5 || gs.Tokens != ps.Tokens || gs.LR != ps.LR || gs.ClipFrac != ps.ClipFrac {
			t.Fatalf("step %d: Go %+v, PyTorch %+v", k+1, gs, ps)
		}
	}
	hfExportsAgree(ctx, t, "after 3 steps", goT, py)
}

// goToHF writes m as an HF directory under root/hf, which it returns.
func goToHF(t testing.TB, m *model.Model, root string) string {
	t.Helper()
	hf := filepath.Join(root, "hf")
	if err := m.SaveDir(hf, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return hf
}

// TestLlamaAgreement: the Go Llama/Qwen3 trainer (model through
// train/embedded.Trainer) and the PyTorch trainer start from the same HF
// directory (a tiny Qwen3: GQA, q/k norm, tied embeddings) and take the
// same batches: loss and grad norm agree to 1e-5 relative at every step,
// the exported weights to 1e-5 relative per tensor. Same AdamW eps note as
// TestGoAgreement.
func TestLlamaAgreement(t *testing.T) {
	t.Parallel()
	dir := tinyModel(t)
	m, err := model.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	oc := model.OptimConfig{LR: 0.01, MinLR: 0.001, WarmupSteps: 2, TotalSteps: 100, Schedule: "cosine",
		WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-3, GradClip: 0.5}
	goT, err := tembedded.New(m, oc, model.LossConfig{ClipLow: 0.2, ClipHigh: 0.28, Norm: model.NormTokenMean})
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, "--impl", "builtin", "--lr", "0.01", "--min-lr", "0.001", "--warmup-steps", "2", "--total-steps", "100",
		"--schedule", "cosine", "--weight-decay", "0.1", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-3", "--grad-clip", "0.5",
		"--clip-low", "0.2", "--clip-high", "0.28", "--norm", "token_mean")
	py := remote.New(p.url, remote.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a bound for a hung run only
	defer cancel()
	for k := range 3 {
		b := batch(uint64(500+k), 5, 8, 40, vocab)
		gs, err := goT.TrainStep(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := py.TrainStep(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d: loss go %.9g torch %.9g (rel %.2g); grad norm go %.9g torch %.9g (rel %.2g)",
			k+1, gs.Loss, ps.Loss, relDiff(gs.Loss, ps.Loss), gs.GradNorm, ps.GradNorm, relDiff(gs.GradNorm, ps.GradNorm))
		if relDiff(gs.Loss, ps.Loss) > 1e-5 || relDiff(gs.GradNorm, ps.GradNorm) > 1e-5 || gs.Tokens != ps.Tokens || gs.LR != ps.LR || gs.ClipFrac != ps.ClipFrac {
			t.Fatalf("step %d: Go %+v, PyTorch %+v", k+1, gs, ps)
		}
	}
	hfExportsAgree(ctx, t, "after 3 steps", goT, py)
}

// hfExportsAgree exports both trainers' weights in HF layout and requires
// them equal to 1e-5 relative per tensor (longhaul_trainer.compare);
// what names the point in the log.
func hfExportsAgree(ctx context.Context, t *testing.T, what string, goT, py interface {
	ExportWeights(context.Context, string) error
}) {
	t.Helper()
	root := t.TempDir()
	goOut, pyOut := filepath.Join(root, "go"), filepath.Join(root, "py")
	for _, d := range []string{goOut, pyOut} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := goT.ExportWeights(ctx, filepath.Join(goOut, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	if err := py.ExportWeights(ctx, filepath.Join(pyOut, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	out, err := pyCmd(ctx, t, "-m", "longhaul_trainer.compare", "--a", goOut, "--b", pyOut).Output()
	if err != nil {
		t.Fatalf("compare: %v: %s", err, out)
	}
	var cmp struct {
		MaxRel float64 `json:"max_rel"`
		Worst  string  `json:"worst_tensor"`
		MaxAbs float64 `json:"max_abs"`
		Error  string  `json:"error"`
	}
	if err := json.Unmarshal(out, &cmp); err != nil || cmp.Error != "" {
		t.Fatalf("compare output %q: %v", out, err)
	}
	t.Logf("weights %s: max relative difference %.3g (%s), max absolute %.3g", what, cmp.MaxRel, cmp.Worst, cmp.MaxAbs)
	if cmp.MaxRel > 1e-5 {
		t.Fatalf("weights differ: %+v", cmp)
	}
}
