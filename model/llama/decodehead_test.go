package llama

import (
	"context"
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
