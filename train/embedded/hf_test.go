package embedded

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

func tinyHF(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{Family: model.FamilyQwen3, Vocab: 50, Dim: 16, Hidden: 32, Layers: 2, Heads: 4,
		KVHeads: 2, NormEps: 1e-6, RopeTheta: 1e6, MaxPos: 64, Tied: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHFTrainerCheckpoint: sample with the HF generator, train on the
// samples with their logprobs as old logprobs, checkpoint, resume in a new
// trainer: the next step matches the uninterrupted trainer's bit for bit;
// an export is an HF directory model.LoadDir reads.
func TestHFTrainerCheckpoint(t *testing.T) {
	ctx := context.Background()
	oc := model.DefaultOptimConfig()
	a, err := New(tinyHF(t), oc, model.LossConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g := gembedded.New(a.Model().Clone(), 0)
	batch := func() train.Batch {
		res, err := g.Generate(ctx, []gen.Request{{Prompt: []int32{1, 2, 3}, MaxTokens: 10, Temperature: 1, Seed: 7},
			{Prompt: []int32{4}, MaxTokens: 12, Temperature: 1, Seed: 8}})
		if err != nil {
			t.Fatal(err)
		}
		var b train.Batch
		for i, r := range res {
			p := [][]int32{{1, 2, 3}, {4}}[i]
			row := train.Row{Tokens: append(append([]int32(nil), p...), r.Tokens...)}
			n := len(row.Tokens)
			row.Mask, row.Advantages, row.OldLogprobs = make([]uint8, n), make([]float32, n), make([]float32, n)
			for j := range r.Tokens {
				row.Mask[len(p)+j], row.Advantages[len(p)+j], row.OldLogprobs[len(p)+j] = 1, float32(1-2*i), r.Logprobs[j]
			}
			b.Rows = append(b.Rows, row)
		}
		return b
	}
	b1 := batch()
	st, err := a.TrainStep(ctx, b1)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClipFrac != 0 || st.Version != 1 {
		t.Fatalf("first step on-policy: clip fraction %v (sampler and trainer logprobs differ?), version %d", st.ClipFrac, st.Version)
	}
	dir := t.TempDir()
	if err := a.SaveCheckpoint(ctx, dir); err != nil {
		t.Fatal(err)
	}
	b2 := batch()
	if _, err := a.TrainStep(ctx, b2); err != nil {
		t.Fatal(err)
	}
	r, _ := New(tinyHF(t), oc, model.LossConfig{})
	if err := r.LoadCheckpoint(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.State(ctx); s.Version != 1 {
		t.Fatalf("resumed at version %d", s.Version)
	}
	if _, err := r.TrainStep(ctx, b2); err != nil {
		t.Fatal(err)
	}
	if r.Model().Digest() != a.Model().Digest() {
		t.Fatal("resumed trainer differs")
	}
	exp := filepath.Join(t.TempDir(), "w")
	os.MkdirAll(exp, 0o755)
	if err := a.ExportWeights(ctx, filepath.Join(exp, WeightsFile)); err != nil {
		t.Fatal(err)
	}
	back, err := model.LoadDir(exp)
	if err != nil || back.Digest() != a.Model().Digest() {
		t.Fatalf("export: %v", err)
	}
}

// TestHFCheckpointThroughSeam: every file of an HF trainer's checkpoint
// (the HF directory's weights and config, the optimizer state, the
// version) is written through the storage seam, so a full disk at any of
// them fails the save instead of passing unseen.
func TestHFCheckpointThroughSeam(t *testing.T) {
	for _, name := range []string{"model.safetensors", "config.json", "generation_config.json", StateFile, MetaFile} {
		t.Run(name, func(t *testing.T) {
			tr, err := New(tinyHF(t), model.DefaultOptimConfig(), model.LossConfig{})
			if err != nil {
				t.Fatal(err)
			}
			f := &store.Faulty{FS: store.OS, Fault: store.NoSpace, At: 1, Match: name}
			tr.SetFS(f)
			err = tr.SaveCheckpoint(context.Background(), t.TempDir())
			if !errors.Is(err, syscall.ENOSPC) || !f.Fired() {
				t.Fatalf("full disk at %s: err = %v, fired %v; want ENOSPC from the seam", name, err, f.Fired())
			}
		})
	}
}
