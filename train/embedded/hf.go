package embedded

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/llama"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

// HFTrainer trains a Llama/Qwen model (model/llama) in process, with the
// same losses, AdamW and versioning as Trainer. Its checkpoints and exports
// are Hugging Face directories (config.json, model.safetensors, tokenizer
// files) plus trainer.state and trainer.json, so any checkpoint loads in
// transformers or vLLM as it is.
type HFTrainer struct {
	t       *llama.Trainer
	oc      model.OptimConfig
	pg, sft model.LossConfig
	version int64
	fs      store.FS // nil: the OS
}

// SetFS routes the checkpoint's files (the HF directory, the optimizer
// state and the version) through fs.
func (t *HFTrainer) SetFS(fs store.FS) { t.fs = fs }

func (t *HFTrainer) storage() store.FS {
	if t.fs == nil {
		return store.OS
	}
	return t.fs
}

// NewHF wraps a llama trainer.
func NewHF(m *llama.Model, oc model.OptimConfig, pg model.LossConfig) (*HFTrainer, error) {
	t, err := llama.NewTrainer(m, oc)
	if err != nil {
		return nil, err
	}
	pg.Kind = model.LossPG
	return &HFTrainer{t: t, oc: oc, pg: pg, sft: model.LossConfig{Kind: model.LossSFT, Norm: model.NormTokenMean}}, nil
}

// Model returns the trained model (mutated by TrainStep).
func (t *HFTrainer) Model() *llama.Model { return t.t.Model() }

// TrainStep implements train.Trainer.
func (t *HFTrainer) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	lc := t.pg
	switch b.Loss {
	case train.LossPG, "":
	case train.LossSFT:
		lc = t.sft
	default:
		return train.StepStats{}, fmt.Errorf("embedded trainer: %w: loss: unknown loss %q", train.ErrInvalidBatch, b.Loss)
	}
	// Bad input is refused by name before it reaches the model, whose
	// errors are then the trainer's own.
	if err := train.ValidateForModel(b, t.t.Model().Config().Vocab, 0); err != nil {
		return train.StepStats{}, fmt.Errorf("embedded trainer: %w", err)
	}
	seqs := make([]model.Sequence, len(b.Rows))
	for i, r := range b.Rows {
		seqs[i] = model.Sequence{Tokens: r.Tokens, Mask: r.Mask, Advantages: r.Advantages, OldLogprobs: r.OldLogprobs}
	}
	st, err := t.t.Step(ctx, seqs, lc)
	if err != nil {
		return train.StepStats{}, fmt.Errorf("embedded trainer: %w", err)
	}
	t.version++
	return train.StepStats{Step: t.version, Version: t.version, Loss: st.Loss, GradNorm: st.GradNorm,
		LR: st.LR, ClipFrac: st.ClipFrac, Tokens: st.Tokens}, nil
}

// State implements train.Trainer.
func (t *HFTrainer) State(context.Context) (train.State, error) {
	return train.State{Step: t.version, Version: t.version}, nil
}

// SaveCheckpoint implements train.Trainer: the HF directory, the optimizer
// state and the version.
func (t *HFTrainer) SaveCheckpoint(_ context.Context, dir string) error {
	fs := t.storage()
	if err := fs.MkdirAll(dir, 0o755); err != nil { // the protocol allows an absent dir
		return fmt.Errorf("embedded trainer: %w", err)
	}
	// Written in place through the seam: the checkpoint writer
	// (train/ckpt) fsyncs the directory's files and publishes it.
	create := func(p string) (io.WriteCloser, error) {
		return fs.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	}
	if err := t.t.Model().SaveDir(dir, llama.SaveOptions{Create: create}); err != nil {
		return fmt.Errorf("embedded trainer: %w", err)
	}
	return saveState(fs, dir, t.t.SaveState, t.version)
}

// LoadCheckpoint implements train.Trainer. A directory that does not hold
// a checkpoint this trainer loads is bad input (train.ErrInvalidInput).
func (t *HFTrainer) LoadCheckpoint(_ context.Context, dir string) error {
	m, err := llama.LoadDir(dir)
	if err != nil {
		return notACheckpoint(dir, err)
	}
	nt, err := llama.NewTrainer(m, t.oc)
	if err != nil {
		return notACheckpoint(dir, err)
	}
	v, err := readState(dir, nt.LoadState)
	if err != nil {
		return notACheckpoint(dir, err)
	}
	t.t, t.version = nt, v
	return nil
}

// ExportWeights implements train.Trainer. path names the weights file of
// an HF directory (…/model.safetensors); the whole directory is written.
func (t *HFTrainer) ExportWeights(_ context.Context, path string) error {
	if filepath.Base(path) != WeightsFile {
		return fmt.Errorf("embedded trainer: export %s: an HF export is a directory whose weights are %s", path, WeightsFile)
	}
	return t.t.Model().SaveDir(filepath.Dir(path), llama.SaveOptions{})
}
