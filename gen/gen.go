// Package gen defines the Generator: token ids in, sampled token ids and
// their logprobs out. The embedded model and OpenAI-compatible servers both
// implement it, so the controller never knows which one it drives.
package gen

import "context"

// Request is one sampling request.
type Request struct {
	Prompt      []int32 // full prompt token ids (already rendered by the chat template)
	MaxTokens   int     // max new tokens; the call finishes with "length" when reached
	Temperature float32 // 0 means greedy
	TopP        float32 // 0 or 1 disables nucleus filtering
	TopK        int     // 0 disables top-k filtering
	Stop        []int32 // token ids that end the sample (the stop token is included in Tokens)
	// Seed fixes the request's random stream, derived by the caller from
	// (run seed, rollout, attempt, call), so the same request samples the
	// same tokens.
	Seed uint64
}

// Result is the outcome of one request.
type Result struct {
	Tokens   []int32   // sampled token ids, including a sampled stop token
	Logprobs []float32 // log-probability of each sampled token under the sampling distribution's source model (temperature 1, before filtering)
	Finish   string    // "stop" or "length"
	Version  int64     // policy weight version that produced the tokens
}

// Generator samples completions. Generate answers each request in order;
// its results are handed over: the caller may keep their slices (the
// rollout logs them as they are), and neither side modifies them after
// Generate returns (a generator may share one result between calls, a
// caller may not write into one). Nor does a generator write into a
// request's slices.
// implementations may batch them (e.g. the G members of a group that share a
// prompt prefix). Errors should be typed with the failure classes of the
// rollout package so the caller can tell infra failures from data failures.
type Generator interface {
	Generate(ctx context.Context, reqs []Request) ([]Result, error)
}
