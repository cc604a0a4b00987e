package runner

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// The warm start of an HF model (model.path): the same oracle episodes as
// the byte model's, rendered through the directory's chat template, with
// the oracle's answers encoded by its tokenizer, trained with the SFT loss
// by the model's trainer. The oracles read conversations, so the prompt
// is decoded back into turns; that is done for ChatML (Qwen2/Qwen3
// templates: "<|im_start|>role\n...<|im_end|>").

// warmStartHF trains m on the demonstrations (warmstart.*) before RL.
func warmStartHF(ctx context.Context, cfg *config.Config, reg *env.Registry, m *model.Model, log *slog.Logger, progress func(done, total int)) error {
	c, parser, err := BuildChat(cfg)
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("warmstart: model.path %s has no chat template", cfg.Model.Path)
	}
	return warmStart(ctx, cfg, reg, &demoChat{chat: c, parser: parser}, log, progress,
		func(oc model.OptimConfig) (stepper, error) { return model.NewTrainer(m, oc) })
}

// chatOracle is a text oracle as a generator of tok's ids: it reads the
// ChatML prompt back into messages and answers with the oracle's text
// encoded, ended by the first stop token (<|im_end|>), as a sampled
// assistant turn ends.
type chatOracle struct {
	tok   lhtok.Tokenizer
	reply textOracle
}

func (o *chatOracle) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	stop := o.tok.StopTokens()
	if len(stop) == 0 {
		return nil, fmt.Errorf("warmstart: the tokenizer has no stop token to end a demonstrated turn")
	}
	out := make([]gen.Result, 0, len(reqs))
	for _, r := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		msgs, err := chatMLMessages(o.tok.Decode(r.Prompt))
		if err != nil {
			return nil, failure.NewData("demo", err)
		}
		text, err := o.reply(msgs)
		if err != nil {
			return nil, err
		}
		toks := append(o.tok.Encode(text), stop[0])
		finish := runlog.FinishStop
		if r.MaxTokens > 0 && len(toks) > r.MaxTokens {
			toks, finish = toks[:r.MaxTokens], runlog.FinishLength
		}
		lp := make([]float32, len(toks))
		for i := range lp {
			lp[i] = scripted.Logprob
		}
		out = append(out, gen.Result{Tokens: toks, Logprobs: lp, Finish: finish})
	}
	return out, nil
}

// chatMLMessages splits a ChatML render into its turns. An assistant
// turn's think block ("<think>...</think>") is dropped, as the rollout's
// parser drops it from the action; an open last turn (the generation
// prompt) is an empty assistant message, as bytetok.Parse gives it.
func chatMLMessages(text string) ([]lhtok.Message, error) {
	const open, end = "<|im_start|>", "<|im_end|>"
	if !strings.HasPrefix(text, open) {
		return nil, fmt.Errorf("warmstart: the prompt is not ChatML (warm start with model.path supports Qwen2/Qwen3 templates): %.40q", text)
	}
	var out []lhtok.Message
	for _, turn := range strings.Split(text, open)[1:] {
		role, body, ok := strings.Cut(turn, "\n")
		if !ok {
			return nil, fmt.Errorf("warmstart: ChatML turn without a role line: %.40q", turn)
		}
		body, _, _ = strings.Cut(body, end)
		if role == "assistant" {
			if _, after, ok := strings.Cut(body, "</think>"); ok {
				body = after
			}
		}
		out = append(out, lhtok.Message{Role: role, Content: strings.TrimSpace(body)})
	}
	return out, nil
}
