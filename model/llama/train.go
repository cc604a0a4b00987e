package llama

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/longhaul-rl/longhaul/model"
)

// The training vocabulary (Sequence, LossConfig, OptimConfig, Stats) is
// model's, so the embedded trainer drives either network the same way, with
// the same loss and AdamW definitions (docs/model.md).

func lossDefaults(lc model.LossConfig) (model.LossConfig, error) {
	if lc.ClipLow == 0 {
		lc.ClipLow = 0.2
	}
	if lc.ClipHigh == 0 {
		lc.ClipHigh = 0.2
	}
	if lc.Norm == "" {
		lc.Norm = model.NormTokenMean
	}
	switch {
	case lc.Kind != model.LossPG && lc.Kind != model.LossSFT:
		return lc, fmt.Errorf("llama: unknown loss kind %q", lc.Kind)
	case lc.Norm != model.NormTokenMean && lc.Norm != model.NormSeqMean:
		return lc, fmt.Errorf("llama: unknown loss normalisation %q", lc.Norm)
	case lc.ClipLow < 0 || lc.ClipLow >= 1 || lc.ClipHigh < 0:
		return lc, fmt.Errorf("llama: bad ratio clip [1-%v, 1+%v]", lc.ClipLow, lc.ClipHigh)
	}
	return lc, nil
}

// Trainer steps a model with AdamW; its state is the step and the moments.
type Trainer struct {
	m        *Model
	oc       model.OptimConfig
	step     int64
	mom, vel []float64
	grad     []float32
}

// NewTrainer returns a trainer at step 0.
func NewTrainer(m *Model, oc model.OptimConfig) (*Trainer, error) {
	if err := oc.Validate(); err != nil {
		return nil, err
	}
	n := len(m.w)
	return &Trainer{m: m, oc: oc, mom: make([]float64, n), vel: make([]float64, n), grad: make([]float32, n)}, nil
}

// StepCount is the number of optimizer steps taken.
func (t *Trainer) StepCount() int64 { return t.step }

// Model is the model being trained.
func (t *Trainer) Model() *Model { return t.m }

type shardStats struct {
	loss, kl float64
	clipped  int
	err      error
	ran      bool
}

// Step runs one optimizer step over seqs: forward and backward in nShards
// fixed shards, gradients summed in shard order, global-norm clipping,
// AdamW. A batch without trained tokens is an error and changes nothing.
func (t *Trainer) Step(ctx context.Context, seqs []model.Sequence, lc model.LossConfig) (model.Stats, error) {
	st, err := t.m.gradient(ctx, seqs, lc, t.grad)
	if err != nil {
		return model.Stats{}, fmt.Errorf("llama: step: %w", err)
	}
	var ss float64
	for _, v := range t.grad {
		ss += float64(float64(v) * float64(v))
	}
	norm := math.Sqrt(ss)
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

// gradient writes the loss gradient over seqs into grad (nil: the loss
// only) and returns the loss statistics.
func (m *Model) gradient(ctx context.Context, seqs []model.Sequence, lc model.LossConfig, grad []float32) (model.Stats, error) {
	lc, err := lossDefaults(lc)
	if err != nil {
		return model.Stats{}, err
	}
	weight := make([]float64, len(seqs))
	cost := make([]int, len(seqs))
	tokens, withTokens := 0, 0
	for i := range seqs {
		n, err := m.checkSeq(&seqs[i], lc)
		if err != nil {
			return model.Stats{}, fmt.Errorf("sequence %d: %w", i, err)
		}
		tokens += n
		if n > 0 {
			withTokens++
			weight[i] = 1 / float64(n)
			cost[i] = len(seqs[i].Tokens)
		}
	}
	if tokens == 0 {
		return model.Stats{}, errors.New("no trainable tokens")
	}
	for i := range weight {
		if weight[i] == 0 {
			continue
		}
		if lc.Norm == model.NormTokenMean {
			weight[i] = 1 / float64(tokens)
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
		longest := 0
		for i := lo; i < hi; i++ {
			longest = max(longest, len(seqs[i].Tokens))
		}
		ws := m.workspace(s, longest, true)
		clear(ws.grad)
		st[s].ran = true
		for i := lo; i < hi; i++ {
			if err := ctx.Err(); err != nil {
				st[s].err = err
				return
			}
			if weight[i] == 0 {
				continue
			}
			ws.rows = ws.rows[:0]
			for t, k := range seqs[i].Mask[1:] {
				if k != 0 {
					ws.rows = append(ws.rows, int32(t))
				}
			}
			m.forward(ws, seqs[i].Tokens, false, ws.rows)
			m.lossGrad(ws, &seqs[i], lc, weight[i], &st[s])
			if grad != nil {
				m.backward(ws, seqs[i].Tokens)
			}
		}
	})
	var loss, kl float64
	clipped, first := 0, true
	for s := range st {
		if st[s].err != nil {
			return model.Stats{}, st[s].err
		}
		if !st[s].ran {
			continue
		}
		loss += st[s].loss
		kl += st[s].kl
		clipped += st[s].clipped
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
	return model.Stats{Loss: loss, ClipFrac: float64(clipped) / float64(tokens), KL: kl / float64(tokens), Tokens: tokens}, nil
}

func (m *Model) checkSeq(s *model.Sequence, lc model.LossConfig) (int, error) {
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
	if lc.Kind == model.LossPG {
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

// lossGrad adds one forwarded sequence's loss to st and writes dlogits:
// the row of position t−1 (row i for ws.rows[i] = t−1) gets
// w·dlp·(onehot(tok_t) − softmax(row)).
func (m *Model) lossGrad(ws *workspace, s *model.Sequence, lc model.LossConfig, w float64, st *shardStats) {
	V := m.cfg.Vocab
	clear(ws.dlogits[:len(ws.rows)*V])
	for i, r := range ws.rows {
		t := int(r) + 1
		row := ws.logits[i*V : (i+1)*V]
		lse, sum := model.LogSumExp(row, ws.e)
		tok := s.Tokens[t]
		loss, dlp, clipped, kl := model.TokenLoss(&lc, float64(row[tok]-lse), s, t)
		st.loss += w * loss
		st.kl += kl
		if clipped {
			st.clipped++
		}
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

// adamw is one AdamW update (torch semantics, decoupled decay on matrices
// and embeddings only), in float64 moments.
func (t *Trainer) adamw(lr float64) {
	t.m.weightsChanged()
	for _, s := range t.m.specs {
		lo, hi := s.off, s.off+s.size
		t.oc.AdamW(t.step, lr, t.m.w[lo:hi], t.grad[lo:hi], t.mom[lo:hi], t.vel[lo:hi], s.decay)
	}
}
