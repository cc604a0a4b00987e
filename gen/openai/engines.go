package openai

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/longhaul-rl/longhaul/gen"
)

// The request shapes of the three server families (docs/serving.md says
// which versions they come from):
//
//   - APIOpenAI: POST /v1/completions with a token-id prompt, logprobs and
//     vLLM's return_token_ids (vLLM, SGLang ≥ #30917, longhaul serve).
//   - APIVLLM: vLLM's token-in/token-out POST /inference/v1/generate
//     (vllm/entrypoints/serve/disagg/protocol.py GenerateRequest).
//   - APISGLang: SGLang's native POST /generate with input_ids and
//     return_logprob (python/sglang/srt/managers/io_struct.py GenerateReqInput).
const (
	APIOpenAI = "openai"
	APIVLLM   = "vllm"
	APISGLang = "sglang"
)

// requestSeq makes vLLM request ids unique within a process (vLLM keys
// aborts and dedupe on them); the seed in front names the sample.
var requestSeq atomic.Uint64

// wireTopK is top_k as the engines read it: always sent, -1 for off
// (vLLM, SGLang and longhaul serve all take -1). Left out, a server that
// applies the model's generation_config.json defaults (vLLM does, and so
// does longhaul serve --model) would sample with the model's top_k, and
// a served run would differ from an in-process one.
func wireTopK(k int) int {
	if k <= 0 {
		return -1
	}
	return k
}

func (c *Client) encodeRequest(r *gen.Request, n int, topP float32) (string, []byte, error) {
	switch c.opts.API {
	case APIVLLM:
		b, err := json.Marshal(vllmGenerateRequest{
			RequestID: fmt.Sprintf("longhaul-%016x-%d", r.Seed, requestSeq.Add(1)),
			TokenIDs:  r.Prompt, Model: c.opts.Model,
			SamplingParams: vllmSamplingParams{N: n, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: topP,
				TopK: wireTopK(r.TopK), Seed: int64(r.Seed), StopTokenIDs: r.Stop, IgnoreEOS: true, Logprobs: 0},
		})
		return "/inference/v1/generate", b, err
	case APISGLang:
		b, err := json.Marshal(sglangGenerateRequest{
			InputIDs: r.Prompt, ReturnLogprob: true,
			SamplingParams: sglangSamplingParams{N: n, MaxNewTokens: r.MaxTokens, Temperature: r.Temperature, TopP: topP,
				TopK: wireTopK(r.TopK), StopTokenIDs: r.Stop, IgnoreEOS: true, SamplingSeed: int64(r.Seed)},
		})
		return "/generate", b, err
	}
	// logprobs 0: the sampled tokens' own logprobs (token_logprobs) and no
	// alternatives, which RL does not use and a server would compute.
	b, err := json.Marshal(completionRequest{
		Model: c.opts.Model, Prompt: r.Prompt, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: topP,
		TopK: wireTopK(r.TopK), Seed: int64(r.Seed), StopTokenIDs: r.Stop, Logprobs: 0,
		ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true, IgnoreEOS: true, N: n,
	})
	return "/v1/completions", b, err
}

// decodeResponse parses an answer of the configured shape; version is -1
// when the answer names none.
func (c *Client) decodeResponse(raw []byte, r *gen.Request, n int) ([]gen.Result, int64, error) {
	switch c.opts.API {
	case APIVLLM:
		return parseVLLM(raw, r, n)
	case APISGLang:
		return parseSGLang(raw, r, n)
	}
	return parse(raw, r, n)
}

type vllmSamplingParams struct {
	N            int     `json:"n"`
	MaxTokens    int     `json:"max_tokens"`
	Temperature  float32 `json:"temperature"`
	TopP         float32 `json:"top_p"`
	TopK         int     `json:"top_k"`
	Seed         int64   `json:"seed"`
	StopTokenIDs []int32 `json:"stop_token_ids,omitempty"`
	IgnoreEOS    bool    `json:"ignore_eos"`
	Logprobs     int     `json:"logprobs"`
}

type vllmGenerateRequest struct {
	RequestID      string             `json:"request_id"`
	TokenIDs       []int32            `json:"token_ids"`
	SamplingParams vllmSamplingParams `json:"sampling_params"`
	Model          string             `json:"model,omitempty"`
}

// vllmGenerateResponse is GenerateResponse: choices carry token_ids and
// chat-style logprobs ({"content": [{"token", "logprob", ...}]}).
type vllmGenerateResponse struct {
	RequestID string `json:"request_id"`
	Choices   []struct {
		Index    int `json:"index"`
		Logprobs *struct {
			Content []struct {
				Token   string   `json:"token"`
				Logprob *float32 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
		TokenIDs     []int32 `json:"token_ids"`
	} `json:"choices"`
	WeightVersion *int64 `json:"weight_version"` // longhaul serve's addition; vLLM sends none
}

func parseVLLM(raw []byte, r *gen.Request, n int) ([]gen.Result, int64, error) {
	var vr vllmGenerateResponse
	if err := json.Unmarshal(raw, &vr); err != nil {
		return nil, 0, fmt.Errorf("decode generate response: %w", err)
	}
	if len(vr.Choices) != n {
		return nil, 0, fmt.Errorf("want %d choices, got %d", n, len(vr.Choices))
	}
	out := make([]gen.Result, n)
	seen := make([]bool, n)
	for k := range vr.Choices {
		ch := &vr.Choices[k]
		if ch.Index < 0 || ch.Index >= n || seen[ch.Index] {
			return nil, 0, fmt.Errorf("choice %d has index %d", k, ch.Index)
		}
		seen[ch.Index] = true
		if ch.TokenIDs == nil {
			return nil, 0, fmt.Errorf("choice %d: response has no token_ids", ch.Index)
		}
		var lp *choiceLogprobs
		if ch.Logprobs != nil {
			lp = &choiceLogprobs{TokenLogprobs: make([]*float32, len(ch.Logprobs.Content))}
			for i, e := range ch.Logprobs.Content {
				lp.TokenLogprobs[i] = e.Logprob
			}
		}
		res, err := parseChoice(ch.TokenIDs, nil, lp, ch.FinishReason, r)
		if err != nil {
			return nil, 0, fmt.Errorf("choice %d: %w", ch.Index, err)
		}
		out[ch.Index] = res
	}
	v := int64(-1)
	if vr.WeightVersion != nil {
		v = *vr.WeightVersion
	}
	return out, v, nil
}

type sglangSamplingParams struct {
	N            int     `json:"n"`
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float32 `json:"temperature"`
	TopP         float32 `json:"top_p"`
	TopK         int     `json:"top_k"`
	StopTokenIDs []int32 `json:"stop_token_ids,omitempty"`
	IgnoreEOS    bool    `json:"ignore_eos"`
	SamplingSeed int64   `json:"sampling_seed"`
}

type sglangGenerateRequest struct {
	InputIDs       []int32              `json:"input_ids"`
	SamplingParams sglangSamplingParams `json:"sampling_params"`
	ReturnLogprob  bool                 `json:"return_logprob"`
}

// sglangOutput is one output of /generate. meta_info.output_token_logprobs
// holds [logprob, token_id, text-or-null] per sampled token.
type sglangOutput struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason *struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
		PromptTokens        *int                `json:"prompt_tokens"`
		WeightVersion       json.RawMessage     `json:"weight_version"`
	} `json:"meta_info"`
}

// parseSGLang reads one output object (n = 1) or an array of n (n > 1).
func parseSGLang(raw []byte, r *gen.Request, n int) ([]gen.Result, int64, error) {
	var outs []sglangOutput
	if n == 1 {
		var o sglangOutput
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, 0, fmt.Errorf("decode generate response: %w", err)
		}
		outs = []sglangOutput{o}
	} else if err := json.Unmarshal(raw, &outs); err != nil {
		return nil, 0, fmt.Errorf("decode generate response (want an array of %d outputs): %w", n, err)
	}
	if len(outs) != n {
		return nil, 0, fmt.Errorf("want %d outputs, got %d", n, len(outs))
	}
	res := make([]gen.Result, n)
	version := int64(-1)
	for k := range outs {
		o := &outs[k]
		mi := &o.MetaInfo
		if mi.PromptTokens != nil && *mi.PromptTokens != len(r.Prompt) {
			return nil, 0, fmt.Errorf("output %d: server saw a %d-token prompt, not the %d tokens sent", k, *mi.PromptTokens, len(r.Prompt))
		}
		if mi.OutputTokenLogprobs == nil {
			return nil, 0, fmt.Errorf("output %d: meta_info has no output_token_logprobs", k)
		}
		toks := make([]int32, len(mi.OutputTokenLogprobs))
		lp := &choiceLogprobs{TokenLogprobs: make([]*float32, len(toks))}
		for i, e := range mi.OutputTokenLogprobs {
			if len(e) < 2 {
				return nil, 0, fmt.Errorf("output %d: output_token_logprobs[%d] has %d entries, want [logprob, token_id, ...]", k, i, len(e))
			}
			var v *float32
			var id int32
			if json.Unmarshal(e[0], &v) != nil || json.Unmarshal(e[1], &id) != nil {
				return nil, 0, fmt.Errorf("output %d: output_token_logprobs[%d] is not [logprob, token_id, ...]", k, i)
			}
			toks[i], lp.TokenLogprobs[i] = id, v
		}
		if o.OutputIDs != nil && !equalIDs(o.OutputIDs, toks) {
			return nil, 0, fmt.Errorf("output %d: output_ids differ from the token ids of output_token_logprobs", k)
		}
		var finish *string
		if mi.FinishReason != nil {
			finish = &mi.FinishReason.Type
		}
		rr, err := parseChoice(toks, nil, lp, finish, r)
		if err != nil {
			return nil, 0, fmt.Errorf("output %d: %w", k, err)
		}
		res[k] = rr
		if v, err := sglangVersion(mi.WeightVersion); err != nil {
			return nil, 0, fmt.Errorf("output %d: %w", k, err)
		} else if v >= 0 {
			version = v
		}
	}
	return res, version, nil
}

// sglangVersion reads SGLang's weight_version, a string ("7"), which
// longhaul sets to the decimal version; absent or null is -1.
func sglangVersion(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return -1, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var v int64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf("weight_version %s is neither a string nor an integer", raw)
		}
		return v, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return -1, nil // SGLang's own names ("default"): not a longhaul version
	}
	return v, nil
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
