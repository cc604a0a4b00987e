package model

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Sequence is one training row. Every slice has len(Tokens) entries, and
// entry i is about token i, predicted from Tokens[:i] (so entry 0, which
// nothing predicts, must have Mask 0).
type Sequence struct {
	Tokens      []int32
	Mask        []uint8   // 1 where token i is trained
	Advantages  []float32 // pg: per-token advantage
	OldLogprobs []float32 // pg: behaviour-policy logprob of token i
	RefLogprobs []float32 // pg with KLCoef ≠ 0: reference-policy logprob of token i
}

// Loss kinds and normalisations.
const (
	LossPG        = "pg"
	LossSFT       = "sft"
	NormTokenMean = "token_mean" // Σ over trained tokens / their count
	NormSeqMean   = "seq_mean"   // mean over sequences of each one's token mean
)

// LossConfig selects the loss. Zero values take defaults: ratio clip
// 0.2/0.2, no KL, token mean.
type LossConfig struct {
	Kind     string  // LossPG or LossSFT
	ClipLow  float32 // pg: ratio clipped below at 1−ClipLow
	ClipHigh float32 // pg: ratio clipped above at 1+ClipHigh
	KLCoef   float32 // pg: weight of the k3 KL estimate against RefLogprobs
	Norm     string  // NormTokenMean or NormSeqMean
}

func (lc LossConfig) withDefaults() (LossConfig, error) {
	if lc.ClipLow == 0 {
		lc.ClipLow = 0.2
	}
	if lc.ClipHigh == 0 {
		lc.ClipHigh = 0.2
	}
	if lc.Norm == "" {
		lc.Norm = NormTokenMean
	}
	switch {
	case lc.Kind != LossPG && lc.Kind != LossSFT:
		return lc, fmt.Errorf("model: unknown loss kind %q", lc.Kind)
	case lc.Norm != NormTokenMean && lc.Norm != NormSeqMean:
		return lc, fmt.Errorf("model: unknown loss normalisation %q", lc.Norm)
	case lc.ClipLow < 0 || lc.ClipLow >= 1 || lc.ClipHigh < 0:
		return lc, fmt.Errorf("model: bad ratio clip [1-%v, 1+%v]", lc.ClipLow, lc.ClipHigh)
	}
	return lc, nil
}

// OptimConfig is AdamW (decoupled weight decay, applied to matrices and
// embeddings only), global-norm gradient clipping and the LR schedule:
// linear warmup over WarmupSteps, then constant or cosine decay to MinLR at
// TotalSteps.
type OptimConfig struct {
	LR, MinLR   float64
	WarmupSteps int
	TotalSteps  int
	Schedule    string // "constant" (default) or "cosine"
	WeightDecay float64
	Beta1       float64
	Beta2       float64
	Eps         float64
	GradClip    float64 // max global grad norm; 0 disables
}

// DefaultOptimConfig suits the default model.
func DefaultOptimConfig() OptimConfig {
	return OptimConfig{LR: 1e-3, MinLR: 1e-4, WarmupSteps: 10, TotalSteps: 1000, Schedule: "constant",
		WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, GradClip: 1}
}

// Validate reports whether the optimizer config is usable.
func (oc OptimConfig) Validate() error {
	switch {
	case !(oc.LR > 0):
		return fmt.Errorf("model: LR must be > 0, got %v", oc.LR)
	case oc.Beta1 < 0 || oc.Beta1 >= 1 || oc.Beta2 < 0 || oc.Beta2 >= 1:
		return fmt.Errorf("model: betas must be in [0,1), got %v, %v", oc.Beta1, oc.Beta2)
	case !(oc.Eps > 0):
		return fmt.Errorf("model: eps must be > 0, got %v", oc.Eps)
	case oc.WarmupSteps < 0 || oc.WeightDecay < 0 || oc.GradClip < 0:
		return fmt.Errorf("model: negative warmup, weight decay or grad clip")
	case oc.Schedule != "" && oc.Schedule != "constant" && oc.Schedule != "cosine":
		return fmt.Errorf("model: unknown schedule %q", oc.Schedule)
	case oc.Schedule == "cosine" && oc.TotalSteps <= oc.WarmupSteps:
		return fmt.Errorf("model: cosine schedule needs TotalSteps > WarmupSteps")
	}
	return nil
}

// LRAt is the learning rate of step s (0-based).
func (oc OptimConfig) LRAt(s int64) float64 {
	w := int64(oc.WarmupSteps)
	if s < w {
		return oc.LR * float64(s+1) / float64(w)
	}
	if oc.Schedule != "cosine" {
		return oc.LR
	}
	prog := math.Min(1, float64(s-w)/float64(int64(oc.TotalSteps)-w))
	return oc.MinLR + (oc.LR-oc.MinLR)*0.5*(1+math.Cos(math.Pi*prog))
}

// Stats describes one optimizer step.
type Stats struct {
	Step     int64   // optimizer steps taken, this one included
	Loss     float64 // the normalised loss
	GradNorm float64 // global gradient norm before clipping
	LR       float64
	ClipFrac float64 // fraction of trained tokens whose ratio was clipped (pg)
	KL       float64 // mean k3 estimate over trained tokens (pg with KLCoef ≠ 0)
	Tokens   int     // trained tokens
	Diag     Diagnostics
}

// Diagnostics describe the policy on the trained tokens as the step's
// forward pass saw it (before the update): what GRPO runs are compared by.
// They are read off values the loss computes anyway and never feed the
// gradient, so they cannot change the weights.
type Diagnostics struct {
	Entropy      float64 // mean entropy (nats) of the policy at trained positions
	ClipLowFrac  float64 // pg: fraction of trained tokens clipped at 1−ClipLow (A < 0)
	ClipHighFrac float64 // pg: fraction clipped at 1+ClipHigh (A > 0)
	// pg: the trainer's logprob against the sampler's (OldLogprobs): mean
	// |Δ|, the mean k3 estimate of KL(sampler‖policy), and quantiles of the
	// importance ratio exp(Δ).
	LogprobAbsDiff float64
	KLSampler      float64
	RatioP05       float64
	RatioP50       float64
	RatioP95       float64
	RatioMax       float64
}

// Trainer steps a model's weights. It holds the AdamW moments and the step
// count; it draws no random numbers, so that is all its state. Not safe for
// concurrent use, nor concurrently with the model's Generate.
type Trainer struct {
	m    *Model
	oc   OptimConfig
	step int64
	mom  []float64 // AdamW first moment, laid out like the weights
	vel  []float64 // AdamW second moment
	grad []float32 // summed gradient scratch
}

// NewTrainer returns a trainer at step 0.
func NewTrainer(m *Model, oc OptimConfig) (*Trainer, error) {
	if err := oc.Validate(); err != nil {
		return nil, err
	}
	m.ensureF32() // the master weights
	n := len(m.w)
	return &Trainer{m: m, oc: oc, mom: make([]float64, n), vel: make([]float64, n), grad: make([]float32, n)}, nil
}

// StepCount is the number of optimizer steps taken.
func (t *Trainer) StepCount() int64 { return t.step }

// Model is the model being trained.
func (t *Trainer) Model() *Model { return t.m }

type shardStats struct {
	loss, kl             float64
	clipped              int
	clipLow, clipHigh    int
	entropy, absDiff, k3 float64
	ratios               []float64
	err                  error
	ran                  bool
}

// Step runs one optimizer step over all seqs: forward and backward in
// nShards fixed shards of contiguous sequences, gradients summed in shard
// order, global-norm clipping, AdamW. A batch without trained tokens is an
// error (and leaves the state unchanged).
func (t *Trainer) Step(ctx context.Context, seqs []Sequence, lc LossConfig) (Stats, error) {
	st, err := t.m.gradient(ctx, seqs, lc, t.grad)
	if err != nil {
		return Stats{}, fmt.Errorf("model: step: %w", err)
	}
	norm := gradNorm(t.grad)
	if t.oc.GradClip > 0 && norm > t.oc.GradClip {
		sc := float32(t.oc.GradClip / (norm + 1e-6))
		for i := range t.grad {
			t.grad[i] *= sc
		}
	}
	lr := t.oc.LRAt(t.step)
	t.adamw(lr)
	t.step++
	st.Step, st.GradNorm, st.LR = t.step, norm, lr
	return st, nil
}

// gradient writes the gradient of the loss over seqs into grad (laid out
// like the weights; nil computes the loss only) and returns the loss
// statistics.
func (m *Model) gradient(ctx context.Context, seqs []Sequence, lc LossConfig, grad []float32) (Stats, error) {
	lc, err := lc.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	// per-sequence token weight from the normalisation
	weight := make([]float64, len(seqs))
	cost := make([]int, len(seqs))
	tokens, withTokens := 0, 0
	for i := range seqs {
		n, err := m.checkSeq(&seqs[i], lc)
		if err != nil {
			return Stats{}, fmt.Errorf("sequence %d: %w", i, err)
		}
		tokens += n
		if n > 0 {
			withTokens++
			weight[i] = 1 / float64(n)
			cost[i] = len(seqs[i].Tokens)
		}
	}
	if tokens == 0 {
		return Stats{}, errors.New("no trainable tokens")
	}
	for i := range weight {
		if lc.Norm == NormTokenMean {
			if weight[i] != 0 {
				weight[i] = 1 / float64(tokens)
			}
		} else {
			weight[i] /= float64(withTokens)
		}
	}

	split := splitShards(cost)
	var st [nShards]shardStats
	runShards(func(s int) {
		lo, hi := split[s][0], split[s][1]
		if lo == hi {
			return
		}
		st[s].ran = true
		// the shard's sequences packed into batches of at most packRows
		// rows (a longer sequence is a batch of its own), in order
		var cuts []int
		most := 1
		for i := lo; i < hi; {
			rows, j := 0, i
			for ; j < hi && (j == i || rows+len(seqs[j].Tokens) <= m.packRows()); j++ {
				if weight[j] != 0 {
					rows += len(seqs[j].Tokens)
				}
			}
			cuts, most, i = append(cuts, j), max(most, rows), j
		}
		ws := m.workspace(s, most, true)
		clear(ws.grad)
		i := lo
		for _, j := range cuts {
			if err := ctx.Err(); err != nil {
				st[s].err = err
				return
			}
			b := &ws.b
			b.reset()
			for k := i; k < j; k++ {
				if weight[k] != 0 {
					b.add(&seqs[k], k)
				}
			}
			if b.n > 0 {
				m.forwardBatch(ws, b)
				m.lossGrad(ws, b, seqs, lc, weight, &st[s])
				if grad != nil {
					m.backwardBatch(ws, b)
				}
			}
			i = j
		}
	})
	var loss, kl float64
	clipped := 0
	var d diagSums
	first := true
	for s := range st {
		if st[s].err != nil {
			return Stats{}, st[s].err
		}
		if !st[s].ran {
			continue
		}
		loss += st[s].loss
		kl += st[s].kl
		clipped += st[s].clipped
		d.add(&st[s])
		g := m.ws[s].grad
		if grad == nil {
			continue
		}
		if first {
			copy(grad, g)
			first = false
			continue
		}
		for i, v := range g {
			grad[i] += v
		}
	}
	return Stats{Loss: loss, ClipFrac: float64(clipped) / float64(tokens), KL: kl / float64(tokens), Tokens: tokens,
		Diag: d.diagnostics(tokens, lc.Kind == LossPG)}, nil
}

// checkSeq validates a sequence and returns its number of trained tokens.
func (m *Model) checkSeq(s *Sequence, lc LossConfig) (int, error) {
	if err := m.checkTokens(s.Tokens); err != nil {
		return 0, err
	}
	n := len(s.Tokens)
	if len(s.Mask) != n {
		return 0, fmt.Errorf("mask has %d entries for %d tokens", len(s.Mask), n)
	}
	if s.Mask[0] != 0 {
		return 0, errors.New("mask[0] must be 0: token 0 is not predicted")
	}
	if lc.Kind == LossPG {
		if len(s.Advantages) != n || len(s.OldLogprobs) != n {
			return 0, fmt.Errorf("pg needs %d advantages and old logprobs, got %d and %d", n, len(s.Advantages), len(s.OldLogprobs))
		}
		if lc.KLCoef != 0 && len(s.RefLogprobs) != n {
			return 0, fmt.Errorf("KL needs %d ref logprobs, got %d", n, len(s.RefLogprobs))
		}
	}
	c := 0
	for _, v := range s.Mask {
		if v != 0 {
			c++
		}
	}
	return c, nil
}

// TokenLoss is the loss of one trained token with logprob lp, and its
// derivative with respect to lp.
//
// pg: ratio r = exp(lp − old); loss = max(−A·r, −A·clip(r, 1−lo, 1+hi)),
// the PPO clipped surrogate (the gradient is 0 where the clipped term wins);
// plus KLCoef·k3 with k3 = exp(ref−lp) − (ref−lp) − 1
// (http://joschu.net/blog/kl-approx.html).
// sft: loss = −lp. Every model family trains with this one definition.
func TokenLoss(lc *LossConfig, lp float64, s *Sequence, i int) (loss, dlp float64, clipped bool, kl float64) {
	if lc.Kind == LossSFT {
		return -lp, -1, false, 0
	}
	a := float64(s.Advantages[i])
	r := math.Exp(lp - float64(s.OldLogprobs[i]))
	rc := math.Min(math.Max(r, 1-float64(lc.ClipLow)), 1+float64(lc.ClipHigh))
	u, v := -a*r, -a*rc
	if v > u {
		loss, clipped = v, true
	} else {
		loss, dlp = u, -a*r
	}
	if lc.KLCoef != 0 {
		delta := float64(s.RefLogprobs[i]) - lp
		e := math.Exp(delta)
		kl = e - delta - 1
		loss += float64(lc.KLCoef) * kl
		dlp += float64(lc.KLCoef) * (1 - e)
	}
	return loss, dlp, clipped, kl
}

// lossGrad adds the loss of a forwarded batch's trained tokens to st and
// writes dlogits: the row of sel[i] (predicting token selT[i] of sequence
// selSeq[i]) gets w·dlp·(onehot(tok) − softmax(row)), w its sequence's
// weight.
func (m *Model) lossGrad(ws *workspace, b *batch, seqs []Sequence, lc LossConfig, weight []float64, st *shardStats) {
	V := m.cfg.Vocab
	clear(ws.dlogits[:len(b.sel)*V])
	for i := range b.sel {
		s, t := &seqs[b.selSeq[i]], int(b.selT[i])
		w := weight[b.selSeq[i]]
		row := ws.logits[i*V : (i+1)*V]
		lse, sum := logSumExp(row, ws.e)
		tok := s.Tokens[t]
		lp := float64(row[tok] - lse)
		loss, dlp, clipped, kl := TokenLoss(&lc, lp, s, t)
		st.loss += w * loss
		st.kl += kl
		if clipped {
			st.clipped++
		}
		st.observe(&lc, lp, float64(lse), row, ws.e[:V], float64(sum), s, t)
		g := float32(w * dlp)
		if g == 0 {
			continue
		}
		drow := ws.dlogits[i*V : (i+1)*V]
		ng := -g / sum
		for j, e := range ws.e[:V] {
			drow[j] = ng * e
		}
		drow[tok] += g
	}
}

// packRows is the most rows a training batch packs (a longer sequence is
// a batch of its own): the workspace's activations scale with it.
func (m *Model) packRows() int {
	if m.packMax > 0 {
		return m.packMax
	}
	return max(m.ctx, 512)
}

func gradNorm(g []float32) float64 {
	var ss float64
	for _, v := range g {
		ss += float64(float64(v) * float64(v))
	}
	return math.Sqrt(ss)
}

// adamw applies one AdamW update with learning rate lr to the weights.
// https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
// The update is elementwise, so the parameters are split into nShards
// contiguous ranges of equal size updated concurrently: every element gets
// the same arithmetic wherever the split falls.
func (t *Trainer) adamw(lr float64) {
	t.m.weightsChanged() // decode's transposed and packed copies are stale
	total := numParams(t.m.specs)
	runShards(func(sh int) {
		a, b := sh*total/nShards, (sh+1)*total/nShards
		for _, s := range t.m.specs {
			lo, hi := max(s.off, a), min(s.off+s.size, b)
			if lo < hi {
				t.oc.AdamW(t.step, lr, t.m.w[lo:hi], t.grad[lo:hi], t.mom[lo:hi], t.vel[lo:hi], s.decay)
			}
		}
	})
}
