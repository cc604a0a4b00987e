package llama

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/longhaul-rl/longhaul/model"
)

// TestPackedHeadSameBits: Generate with the head packed for decode (every
// call) gives the same tokens and logprobs, bit for bit, as with the head
// read in place (never packed), for a batch and for a single request (the
// two-goroutine split), on every family; the packed path really ran.
// TestGenerateLogprobsMatchTraining compares the packed path (its
// completions are longer than packHeadMinSteps) with the trainer.
func TestPackedHeadSameBits(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg, 5, 4)
			r := rand.New(rand.NewPCG(3, 4))
			batch := []model.SampleRequest{
				{Prompt: randTokens(r, 4, cfg.Vocab), MaxTokens: 12, Temperature: 1, Seed: 1},
				{Prompt: randTokens(r, 2, cfg.Vocab), MaxTokens: 3, Temperature: 0.8, TopK: 7, Seed: 2},
				{Prompt: randTokens(r, 7, cfg.Vocab), MaxTokens: 9, Temperature: 0, Seed: 3},
			}
			for _, reqs := range [][]model.SampleRequest{batch, batch[:1]} {
				m.packMin = 1 << 30
				m.weightsChanged() // drop the packing the previous round kept
				plain, err := m.Generate(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if m.dh.on {
					t.Fatal("the head was packed with packMin huge")
				}
				m.packMin = 1
				packed, err := m.Generate(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if !m.dh.on {
					t.Fatal("the head was not packed with packMin 1")
				}
				for i := range reqs {
					if !slices.Equal(plain[i].Tokens, packed[i].Tokens) || !slices.Equal(plain[i].Logprobs, packed[i].Logprobs) {
						t.Fatalf("%d requests, request %d: packed head %v %v, in place %v %v", len(reqs), i,
							packed[i].Tokens, packed[i].Logprobs, plain[i].Tokens, plain[i].Logprobs)
					}
				}
			}
		})
	}
}

// TestPackedHeadFollowsWeights: the packed head is kept across Generate
// calls and dropped when the weights change (a trainer step,
// CopyWeightsFrom, a Tensor write): the next call samples from the new
// weights exactly as a fresh model with those weights does.
func TestPackedHeadFollowsWeights(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfigs()["qwen3"]
	m := testModel(t, cfg, 5, 4)
	m.packMin = 1
	r := rand.New(rand.NewPCG(5, 6))
	reqs := []model.SampleRequest{{Prompt: randTokens(r, 4, cfg.Vocab), MaxTokens: 10, Temperature: 1, Seed: 9}}
	gen := func(m *Model) model.SampleResult {
		t.Helper()
		res, err := m.Generate(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	same := func(what string, a, b model.SampleResult) {
		t.Helper()
		if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.Logprobs, b.Logprobs) {
			t.Fatalf("%s: %v %v, a fresh copy gives %v %v", what, a.Tokens, a.Logprobs, b.Tokens, b.Logprobs)
		}
	}
	gen(m) // packs
	tr, err := NewTrainer(m, model.DefaultOptimConfig())
	if err != nil {
		t.Fatal(err)
	}
	seq := model.Sequence{Tokens: randTokens(r, 12, cfg.Vocab), Mask: make([]uint8, 12)}
	for i := 4; i < 12; i++ {
		seq.Mask[i] = 1
	}
	if _, err := tr.Step(ctx, []model.Sequence{seq}, model.LossConfig{Kind: model.LossSFT}); err != nil {
		t.Fatal(err)
	}
	same("after a trainer step", gen(m), gen(m.Clone()))
	other := testModel(t, cfg, 6, 4)
	if err := m.CopyWeightsFrom(other); err != nil {
		t.Fatal(err)
	}
	same("after CopyWeightsFrom", gen(m), gen(other))
	h := m.Tensor("lm_head.weight")
	if h == nil { // tied: the head is embed_tokens
		h = m.Tensor("model.embed_tokens.weight")
	}
	for i := range h {
		h[i] *= 1.5
	}
	same("after a Tensor write", gen(m), gen(m.Clone()))
}

// BenchmarkDecodeHead: the tiny Qwen3's head (d 256, V 151,936) at 1 and
// 16 rows, read in place by kern.MatMulNT (before) and from the packed
// halves (headProduct), and the packing itself.
func BenchmarkDecodeHead(b *testing.B) {
	cfg := tinyConfigs()["qwen3"]
	cfg.Dim, cfg.Vocab, cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.Hidden = 256, 151936, 8, 2, 32, 64
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, B := range []int{1, 16} {
		buf := m.newDecodeBuf(B)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range buf.ln[:B*cfg.Dim] {
			buf.ln[i] = r.Float32()
		}
		b.Run(fmt.Sprintf("NT/rows=%d", B), func(b *testing.B) {
			m.weightsChanged()
			m.packHead(0, 1<<30)
			for range b.N {
				m.headProduct(buf, B, false)
			}
		})
		b.Run(fmt.Sprintf("packed/rows=%d", B), func(b *testing.B) {
			m.packHead(1, 1)
			for range b.N {
				m.headProduct(buf, B, false)
			}
		})
	}
	b.Run("pack", func(b *testing.B) {
		for range b.N {
			m.weightsChanged()
			m.packHead(1, 1)
		}
	})
}
