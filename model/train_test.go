package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/nlpodyssey/safetensors"
)

func trainSetup(t testing.TB) (*Model, []Sequence) {
	t.Helper()
	cfg := smallConfig()
	m, err := New(cfg, 21)
	if err != nil {
		t.Fatal(err)
	}
	return m, testSeqs(t, m, []int{60, 33, 17, 9, 41}, 8)
}

func testOptim() OptimConfig {
	oc := DefaultOptimConfig()
	oc.LR, oc.WarmupSteps, oc.TotalSteps, oc.Schedule = 3e-3, 2, 10, "cosine"
	return oc
}

func trainSteps(t testing.TB, tr *Trainer, seqs []Sequence, n int) []Stats {
	t.Helper()
	var out []Stats
	for i := 0; i < n; i++ {
		lc := LossConfig{Kind: LossPG, KLCoef: 0.05}
		if i%3 == 2 {
			lc = LossConfig{Kind: LossSFT, Norm: NormSeqMean}
		}
		st, err := tr.Step(context.Background(), seqs, lc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

// TestTrainDeterministic: the same steps give bit-identical weights across
// runs and across GOMAXPROCS 1 and 2 (fixed shards, fixed summation order).
func TestTrainDeterministic(t *testing.T) {
	var digests [][32]byte
	var stats [][]Stats
	for _, procs := range []int{2, 1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		m, seqs := trainSetup(t)
		tr, err := NewTrainer(m, testOptim())
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, trainSteps(t, tr, seqs, 4))
		runtime.GOMAXPROCS(prev)
		digests = append(digests, m.Digest())
	}
	for i := 1; i < len(digests); i++ {
		if digests[i] != digests[0] || !slices.Equal(stats[i], stats[0]) {
			t.Fatalf("run %d differs from run 0", i)
		}
	}
	if s := stats[0]; !(s[3].Loss < s[0].Loss) && s[0].GradNorm == 0 {
		t.Fatalf("no learning signal: %+v", s)
	}
}

// TestTrainLearns: SFT on a fixed batch drives its loss down.
func TestTrainLearns(t *testing.T) {
	m, _ := trainSetup(t)
	seqs := testSeqs(t, m, []int{24, 16}, 9)
	for i := range seqs {
		for j := 1; j < len(seqs[i].Mask); j++ {
			seqs[i].Mask[j] = 1
		}
	}
	oc := testOptim()
	oc.Schedule, oc.LR = "constant", 2e-2
	tr, err := NewTrainer(m, oc)
	if err != nil {
		t.Fatal(err)
	}
	var first, last float64
	for i := 0; i < 15; i++ {
		st, err := tr.Step(context.Background(), seqs, LossConfig{Kind: LossSFT})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st.Loss
		}
		last = st.Loss
	}
	if !(last < first*0.7) {
		t.Fatalf("SFT loss %v -> %v: not learning", first, last)
	}
}

// TestResumeExact: train, save weights and optimizer state, load into a
// fresh model and trainer, continue: bit-identical to training straight
// through.
func TestResumeExact(t *testing.T) {
	m1, seqs := trainSetup(t)
	tr1, _ := NewTrainer(m1, testOptim())
	trainSteps(t, tr1, seqs, 6)

	m2, _ := trainSetup(t)
	tr2, _ := NewTrainer(m2, testOptim())
	trainSteps(t, tr2, seqs, 3)
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := m2.SaveSafetensors(path); err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := tr2.SaveState(&state); err != nil {
		t.Fatal(err)
	}
	m3, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if m3.Digest() != m2.Digest() || !m3.cfg.Equal(m2.cfg) {
		t.Fatal("weights or config changed through save/load")
	}
	tr3, _ := NewTrainer(m3, testOptim())
	if err := tr3.LoadState(bytes.NewReader(state.Bytes())); err != nil {
		t.Fatal(err)
	}
	if tr3.StepCount() != 3 {
		t.Fatalf("step %d after load", tr3.StepCount())
	}
	// the remaining steps use the same loss sequence as steps 3..5 of run 1
	for i := 3; i < 6; i++ {
		lc := LossConfig{Kind: LossPG, KLCoef: 0.05}
		if i%3 == 2 {
			lc = LossConfig{Kind: LossSFT, Norm: NormSeqMean}
		}
		if _, err := tr3.Step(context.Background(), seqs, lc); err != nil {
			t.Fatal(err)
		}
	}
	if m3.Digest() != m1.Digest() {
		t.Fatal("resumed training differs from training straight through")
	}
	// a corrupted state file is refused
	bad := slices.Clone(state.Bytes())
	bad[100] ^= 1
	if err := tr3.LoadState(bytes.NewReader(bad)); err == nil {
		t.Fatal("corrupt state accepted")
	}
	if err := tr3.LoadState(bytes.NewReader(bad[:50])); err == nil {
		t.Fatal("truncated state accepted")
	}
}

// TestSafetensorsOracle checks the writer and reader against
// github.com/nlpodyssey/safetensors.
func TestSafetensorsOracle(t *testing.T) {
	m := testModel(t, qwen3Small(), 4, 1)
	data, err := m.EncodeSafetensors()
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Deserialize(data)
	if err != nil {
		t.Fatalf("oracle cannot read our file: %v", err)
	}
	if st.Len() != len(m.specs) {
		t.Fatalf("oracle sees %d tensors, want %d", st.Len(), len(m.specs))
	}
	views := map[string]safetensors.TensorView{}
	for _, s := range m.specs {
		tv, ok := st.Tensor(s.name)
		if !ok {
			t.Fatalf("oracle misses %s", s.name)
		}
		shape := make([]int, len(tv.Shape()))
		for i, v := range tv.Shape() {
			shape[i] = int(v)
		}
		if tv.DType() != safetensors.F32 || !slices.Equal(shape, s.shape) {
			t.Fatalf("%s: oracle sees %v %v", s.name, tv.DType(), tv.Shape())
		}
		for i := 0; i < s.size; i++ {
			if math.Float32frombits(binary.LittleEndian.Uint32(tv.Data()[4*i:])) != m.w[s.off+i] {
				t.Fatalf("%s[%d] differs", s.name, i)
			}
		}
		views[s.name] = tv
	}
	// the oracle's own serialisation (its tensor order, its header) reads back
	theirs, err := safetensors.Serialize(views, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.cfg
	m2, err := DecodeSafetensors(theirs, cfg)
	if err != nil {
		t.Fatalf("cannot read the oracle's file: %v", err)
	}
	if m2.Digest() != m.Digest() {
		t.Fatal("weights differ after the oracle's round trip")
	}
	// malformed files fail cleanly
	for _, bad := range [][]byte{data[:5], data[:len(data)-4], append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, data[8:]...)} {
		if _, err := DecodeSafetensors(bad, cfg); err == nil {
			t.Fatal("malformed file accepted")
		}
	}
	// config.json is written beside the weights and is what Load reads
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	if err := m.SaveSafetensors(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	m4, err := Load(path)
	if err != nil || m4.Digest() != m.Digest() {
		t.Fatalf("load: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if c := DefaultConfig(); c.Validate() != nil {
		t.Fatal(c.Validate())
	}
	bad := DefaultConfig()
	bad.Heads = 5
	if bad.Validate() == nil {
		t.Fatal("heads not divisible by kv heads accepted")
	}
	bad = DefaultConfig()
	bad.RopeTheta = 0
	if bad.Validate() == nil {
		t.Fatal("rope_theta 0 accepted")
	}
	if _, err := New(bad, 1); err == nil {
		t.Fatal("New accepted a bad config")
	}
	a, _ := New(DefaultConfig(), 7)
	b, _ := New(DefaultConfig(), 7)
	c, _ := New(DefaultConfig(), 8)
	if a.Digest() != b.Digest() || a.Digest() == c.Digest() {
		t.Fatal("init is not a function of the seed")
	}
}

func TestStepErrors(t *testing.T) {
	m, seqs := trainSetup(t)
	tr, _ := NewTrainer(m, testOptim())
	ctx := context.Background()
	if _, err := tr.Step(ctx, []Sequence{{Tokens: []int32{1, 2}, Mask: []uint8{0, 0}}}, LossConfig{Kind: LossSFT}); err == nil {
		t.Fatal("a batch without trained tokens must fail")
	}
	s := seqs[0]
	s.Mask = s.Mask[:3]
	if _, err := tr.Step(ctx, []Sequence{s}, LossConfig{Kind: LossPG}); err == nil {
		t.Fatal("mismatched mask length accepted")
	}
	if _, err := tr.Step(ctx, seqs, LossConfig{Kind: "dpo"}); err == nil {
		t.Fatal("unknown loss accepted")
	}
	if tr.StepCount() != 0 {
		t.Fatal("failed steps advanced the step count")
	}
}

func TestLRSchedule(t *testing.T) {
	oc := OptimConfig{LR: 1, MinLR: 0.1, WarmupSteps: 4, TotalSteps: 14, Schedule: "cosine"}
	for s, want := range map[int64]float64{0: 0.25, 3: 1, 4: 1, 9: 0.55, 14: 0.1, 20: 0.1} {
		if got := oc.LRAt(s); math.Abs(got-want) > 1e-12 {
			t.Errorf("LRAt(%d) = %v, want %v", s, got, want)
		}
	}
}

// TestCloneIndependent: a clone generates concurrently with training on
// the original and matches it until the original changes.
func TestCloneIndependent(t *testing.T) {
	m, seqs := trainSetup(t)
	c := m.Clone()
	if c.Digest() != m.Digest() {
		t.Fatal("clone differs")
	}
	tr, _ := NewTrainer(m, testOptim())
	done := make(chan error, 1)
	go func() {
		_, err := c.Generate(context.Background(), []SampleRequest{{Prompt: seqs[0].Tokens[:5], MaxTokens: 20, Temperature: 1}})
		done <- err
	}()
	trainSteps(t, tr, seqs, 1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.Digest() == m.Digest() {
		t.Fatal("training the original changed the clone")
	}
	if err := c.CopyWeightsFrom(m); err != nil || c.Digest() != m.Digest() {
		t.Fatalf("CopyWeightsFrom: %v", err)
	}
}
