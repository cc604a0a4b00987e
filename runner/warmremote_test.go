package runner

import (
	"net/http/httptest"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/train"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
	"github.com/longhaul-rl/longhaul/train/remote"
)

// TestWarmTrainerOverProtocol: the Go serve-trainer's warm steps, sent
// over the protocol, move the weights exactly as a second trainer over
// the same weights does (the in-process warm start), leave the RL step at
// 0, and the first RL step after them is step 1.
func TestWarmTrainerOverProtocol(t *testing.T) {
	cfg := config.Default()
	cfg.Model.Dim, cfg.Model.Hidden, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.Context = 16, 32, 1, 2, 32
	cfg.Warmstart.Steps, cfg.Warmstart.LR = 3, 1e-2
	mk := func() *tembedded.Trainer {
		m, err := InitModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := tembedded.New(m, OptimConfig(cfg), LossConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	served, ref := mk(), mk()
	srv := httptest.NewServer(remote.Handler(NewWarmTrainer(served, OptimConfig(cfg))))
	defer srv.Close()
	rc := remote.New(srv.URL, remote.Options{})
	second, err := model.NewTrainer(ref.Model(), warmOptim(cfg))
	if err != nil {
		t.Fatal(err)
	}
	row := func(k int) train.Row {
		toks := []int32{256, int32(10 + k), int32(20 + k), int32(30 + k), 257}
		return train.Row{Tokens: toks, Mask: []uint8{0, 0, 1, 1, 1}, Advantages: make([]float32, 5), OldLogprobs: make([]float32, 5)}
	}
	oc := warmOptim(cfg)
	for k := range cfg.Warmstart.Steps {
		b := train.Batch{Loss: train.LossSFT, Rows: []train.Row{row(k), row(k + 5)}}
		ws, err := rc.WarmStep(t.Context(), remote.WarmSpec{Index: k, Steps: cfg.Warmstart.Steps, WarmupSteps: oc.WarmupSteps, LR: oc.LR}, b)
		if err != nil {
			t.Fatal(err)
		}
		seqs := []model.Sequence{{Tokens: b.Rows[0].Tokens, Mask: b.Rows[0].Mask}, {Tokens: b.Rows[1].Tokens, Mask: b.Rows[1].Mask}}
		st, err := second.Step(t.Context(), seqs, model.LossConfig{Kind: model.LossSFT, Norm: model.NormTokenMean})
		if err != nil {
			t.Fatal(err)
		}
		if ws.Loss != st.Loss || ws.GradNorm != st.GradNorm || ws.LR != st.LR || ws.WarmStep != k+1 {
			t.Fatalf("warm step %d: served %+v, second trainer %+v", k, ws, st)
		}
	}
	if served.Model().Digest() != ref.Model().Digest() {
		t.Fatal("weights after the warm steps differ from the second trainer's")
	}
	if w, step, err := rc.WarmState(t.Context()); err != nil || w != cfg.Warmstart.Steps || step != 0 {
		t.Fatalf("after the warm start: warm_step %d, step %d, %v", w, step, err)
	}
	st, err := rc.TrainStep(t.Context(), train.Batch{Loss: train.LossPG, Rows: []train.Row{row(9)}})
	if err != nil || st.Step != 1 {
		t.Fatalf("first RL step: %+v, %v", st, err)
	}
}
