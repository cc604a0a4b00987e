package pytorch

import (
	"context"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/train"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
	"github.com/longhaul-rl/longhaul/train/remote"
)

// TestWarmStartAgreement: the warm start as an in-process run does it (a
// second model trainer over the weights, the SFT loss, the warm
// start's constant lr after its warmup) and as the PyTorch trainer does
// it over /v1/warm_step, from the same tiny Qwen3; then one RL step on
// each (train/embedded.Trainer, /v1/train_step), whose optimizer the
// warm start must not have touched. Loss and grad norm agree to 1e-5
// relative at every step, the exported weights to 1e-5 relative per
// tensor. Same AdamW eps note as TestGoAgreement.
func TestWarmStartAgreement(t *testing.T) {
	t.Parallel()
	dir := tinyModel(t)
	m, err := model.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	oc := model.OptimConfig{LR: 0.01, MinLR: 0.001, WarmupSteps: 2, TotalSteps: 100, Schedule: "cosine",
		WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-3, GradClip: 0.5}
	const steps = 3
	spec := remote.WarmSpec{Steps: steps, WarmupSteps: 2, LR: 0.02}
	woc := oc // what runner.warmOptim makes of the run's optimizer
	woc.LR, woc.MinLR, woc.Schedule, woc.WarmupSteps, woc.TotalSteps = spec.LR, spec.LR, "constant", spec.WarmupSteps, steps
	goWarm, err := model.NewTrainer(m, woc)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, "--impl", "builtin", "--lr", "0.01", "--min-lr", "0.001", "--warmup-steps", "2", "--total-steps", "100",
		"--schedule", "cosine", "--weight-decay", "0.1", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-3", "--grad-clip", "0.5",
		"--clip-low", "0.2", "--clip-high", "0.28", "--norm", "token_mean")
	py := remote.New(p.url, remote.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a bound for a hung run only
	defer cancel()
	agree := func(what string, gl, pl, gg, pg, glr, plr float64) {
		t.Logf("%s: loss go %.9g torch %.9g (rel %.2g); grad norm go %.9g torch %.9g (rel %.2g)", what, gl, pl, relDiff(gl, pl), gg, pg, relDiff(gg, pg))
		if relDiff(gl, pl) > 1e-5 || relDiff(gg, pg) > 1e-5 || glr != plr {
			t.Fatalf("%s: Go loss %v grad norm %v lr %v, PyTorch %v %v %v", what, gl, gg, glr, pl, pg, plr)
		}
	}
	for k := range steps {
		b := batch(uint64(700+k), 5, 8, 40, vocab)
		b.Loss = train.LossSFT
		seqs := make([]model.Sequence, len(b.Rows))
		for i, r := range b.Rows {
			seqs[i] = model.Sequence{Tokens: r.Tokens, Mask: r.Mask}
		}
		gs, err := goWarm.Step(ctx, seqs, model.LossConfig{Kind: model.LossSFT, Norm: model.NormTokenMean})
		if err != nil {
			t.Fatal(err)
		}
		spec.Index = k
		ps, err := py.WarmStep(ctx, spec, b)
		if err != nil {
			t.Fatal(err)
		}
		if ps.WarmStep != k+1 || gs.Tokens != ps.Tokens {
			t.Fatalf("warm step %d: PyTorch %+v, Go %+v", k, ps, gs)
		}
		agree("warm step "+string(rune('1'+k)), gs.Loss, ps.Loss, gs.GradNorm, ps.GradNorm, gs.LR, ps.LR)
	}
	if w, s, err := py.WarmState(ctx); err != nil || w != steps || s != 0 {
		t.Fatalf("PyTorch trainer after the warm start: warm_step %d, step %d, %v", w, s, err)
	}
	goT, err := tembedded.New(m, oc, model.LossConfig{ClipLow: 0.2, ClipHigh: 0.28, Norm: model.NormTokenMean})
	if err != nil {
		t.Fatal(err)
	}
	b := batch(800, 5, 8, 40, vocab)
	gs, err := goT.TrainStep(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := py.TrainStep(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Step != 1 || ps.Step != 1 {
		t.Fatalf("the first RL step after the warm start is step %d (Go), %d (PyTorch), want 1", gs.Step, ps.Step)
	}
	agree("RL step 1", gs.Loss, ps.Loss, gs.GradNorm, ps.GradNorm, gs.LR, ps.LR)
	hfExportsAgree(ctx, t, "after the warm start and one RL step", goT, py)
}
