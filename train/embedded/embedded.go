// Package embedded is the in-process Trainer over the embedded model
// (model: the built-in configuration or a Llama/Qwen checkpoint).
package embedded

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

// Checkpoint file names.
const (
	WeightsFile = "model.safetensors"
	StateFile   = "trainer.state"
	MetaFile    = "trainer.json"
)

// Trainer trains an embedded model with the PG loss (and SFT for warm
// start). Step k publishes version k: the version is the optimizer step
// count of RL steps, kept separately from the model's own step counter so a
// warm start does not shift versions. Its checkpoints and exports are
// Hugging Face directories (config.json, model.safetensors, the tokenizer
// files of a model loaded from one) plus trainer.state and trainer.json,
// so any checkpoint loads in transformers or vLLM as it is.
type Trainer struct {
	t       *model.Trainer
	oc      model.OptimConfig
	pg      model.LossConfig
	sft     model.LossConfig
	version int64
	fs      store.FS // nil: the OS
}

// SetFS routes the trainer's checkpoint and export files through fs (the
// run's storage seam: tests make a checkpoint write fail, a mirrored run
// directory fetches a checkpoint from its bucket).
func (t *Trainer) SetFS(fs store.FS) { t.fs = fs }

func (t *Trainer) storage() store.FS {
	if t.fs == nil {
		return store.OS
	}
	return t.fs
}

// New wraps a model trainer.
func New(m *model.Model, oc model.OptimConfig, pg model.LossConfig) (*Trainer, error) {
	t, err := model.NewTrainer(m, oc)
	if err != nil {
		return nil, err
	}
	pg.Kind = model.LossPG
	return &Trainer{t: t, oc: oc, pg: pg, sft: model.LossConfig{Kind: model.LossSFT, Norm: model.NormTokenMean}}, nil
}

// Model returns the trained model (mutated by TrainStep).
func (t *Trainer) Model() *model.Model { return t.t.Model() }

// TrainStep implements train.Trainer.
func (t *Trainer) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	lc := t.pg
	switch b.Loss {
	case train.LossPG, "":
	case train.LossSFT:
		lc = t.sft
	default:
		return train.StepStats{}, fmt.Errorf("embedded trainer: %w: loss: unknown loss %q", train.ErrInvalidBatch, b.Loss)
	}
	m := t.t.Model()
	if err := train.ValidateForModel(b, m.Config().Vocab, m.Context()); err != nil {
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
		LR: st.LR, ClipFrac: st.ClipFrac, Tokens: st.Tokens, Diag: diagnostics(st)}, nil
}

// State implements train.Trainer.
func (t *Trainer) State(context.Context) (train.State, error) {
	return train.State{Step: t.version, Version: t.version}, nil
}

// SaveCheckpoint implements train.Trainer: the HF directory, the optimizer
// state and the version, written plainly through the storage seam: the
// checkpoint writer (train/ckpt) fsyncs the directory's files and
// publishes it by rename.
func (t *Trainer) SaveCheckpoint(_ context.Context, dir string) error {
	fs := t.storage()
	if err := fs.MkdirAll(dir, 0o755); err != nil { // the protocol allows an absent dir
		return fmt.Errorf("embedded trainer: %w", err)
	}
	create := func(p string) (io.WriteCloser, error) {
		return fs.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	}
	if err := t.t.Model().SaveDir(dir, model.SaveOptions{Create: create}); err != nil {
		return fmt.Errorf("embedded trainer: %w", err)
	}
	return saveState(fs, dir, t.t.SaveState, t.version)
}

// LoadCheckpoint implements train.Trainer. A directory that does not hold
// a checkpoint this trainer loads is bad input (train.ErrInvalidInput).
func (t *Trainer) LoadCheckpoint(_ context.Context, dir string) error {
	// LoadDirWith reads the directory itself: the controller verified
	// every file of the checkpoint through the seam first (ckpt.LatestFS),
	// which on a mirrored run directory also fetched them.
	m, err := model.LoadDirWith(dir, model.LoadOptions{Copy: true})
	if err != nil {
		return notACheckpoint(dir, err)
	}
	if old := t.t.Model(); old.Context() != m.Context() {
		if err := m.SetContext(old.Context()); err != nil {
			return fmt.Errorf("embedded trainer: %w", err)
		}
	}
	nt, err := model.NewTrainer(m, t.oc)
	if err != nil {
		return notACheckpoint(dir, err)
	}
	v, err := readState(t.storage(), dir, nt.LoadState)
	if err != nil {
		return notACheckpoint(dir, err)
	}
	t.t, t.version = nt, v
	return nil
}

// ExportWeights implements train.Trainer: path names the weights file of
// an HF directory (…/model.safetensors), and the whole directory is
// written; any other name gets the weights and config.json beside them.
func (t *Trainer) ExportWeights(_ context.Context, path string) error {
	// SaveDir and SaveSafetensors write each file by temporary file and
	// rename themselves (atomic, as servers reload them); a mirrored run
	// directory picks the files up by their size and time, as it does a
	// remote trainer's.
	if filepath.Base(path) == WeightsFile {
		return t.t.Model().SaveDir(filepath.Dir(path), model.SaveOptions{})
	}
	return t.t.Model().SaveSafetensors(path)
}

func diagnostics(st model.Stats) train.Diagnostics {
	d := st.Diag
	return train.Diagnostics{Entropy: d.Entropy, KLRef: st.KL, KLSampler: d.KLSampler,
		ClipLowFrac: d.ClipLowFrac, ClipHighFrac: d.ClipHighFrac, LogprobAbsDiff: d.LogprobAbsDiff,
		RatioP05: d.RatioP05, RatioP50: d.RatioP50, RatioP95: d.RatioP95, RatioMax: d.RatioMax}
}
