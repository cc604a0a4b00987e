// Package openai is a gen.Generator over OpenAI-compatible servers (vLLM,
// SGLang, `longhaul serve`). It sends token ids and reads token ids and
// logprobs back (the vLLM extensions return_token_ids and
// return_tokens_as_token_ids), spreads calls over several servers by least
// outstanding requests, takes servers that refuse connections out of the
// rotation until a health probe or a backoff brings them back, and types
// every failure as infra or data.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
)

// versionHeader is where `longhaul serve` reports the weight version.
const versionHeader = "X-Longhaul-Weight-Version"

// instanceHeader is where `longhaul serve` names its process (a value drawn
// at start, server.InstanceHeader): a change means a restart.
const instanceHeader = "X-Longhaul-Server-Instance"

// Options configure a Client. Zero values pick the defaults shown.
type Options struct {
	Model  string // sent as "model"; "" sends none (vLLM and longhaul serve then use their one model)
	APIKey string // sent as a bearer token when set
	// HTTPClient carries the requests; nil means a client with a
	// keep-alive pool sized for many concurrent calls.
	HTTPClient *http.Client
	// RequestTimeout is the deadline of one HTTP call (default 10m).
	RequestTimeout time.Duration
	// ProbeInterval is how often /health is probed (default 2s);
	// ProbeTimeout bounds one probe (default 2s).
	ProbeInterval, ProbeTimeout time.Duration
	// MinBackoff and MaxBackoff bound how long a down server stays out of
	// the rotation before it is tried again (defaults 250ms, 30s; doubling).
	MinBackoff, MaxBackoff time.Duration
	// OnCall, when set, is told each HTTP call's server, duration and
	// whether it failed (the Prometheus per-server latency histograms).
	OnCall func(server string, d time.Duration, err error)
	// MaxConcurrency bounds the HTTP calls one Generate has in flight
	// (default 256).
	MaxConcurrency int
	// MaxResponseBytes bounds a response body (default 64 MiB).
	MaxResponseBytes int64
	// GroupByPrompt sends requests that differ only in their seed as one
	// call with n > 1, so a batching server (longhaul serve) sees the group
	// as one batch. Samples stay deterministic, but a request's sample then
	// depends on the first seed of its group and its place in it, not on
	// its own seed. Off by default.
	GroupByPrompt bool
	// API is the servers' request shape: APIOpenAI (default: /v1/completions
	// with vLLM's token-id extensions; longhaul serve), APIVLLM
	// (/inference/v1/generate) or APISGLang (/generate). engines.go.
	API string
	// ReloadMethod is the worker method UpdateWeights calls through vLLM's
	// /collective_rpc (default "reload_weights"; see weights.go).
	ReloadMethod string
	Logger       *slog.Logger
	// MaxOutage is how long a call waits, retrying with backoff, while no
	// server can take it (all down, connection refused, 503) before it
	// fails (default 600s: rollout_failure.max_outage_s). The wait spends
	// no retry budget.
	MaxOutage time.Duration
}

// Client is a gen.Generator over a set of servers. It is safe for
// concurrent use. Create it with New; Close stops its prober.
type Client struct {
	opts     Options
	hc       *http.Client
	log      *slog.Logger
	backends []*backend

	mu   sync.Mutex // guards picking, so in-flight counts stay exact
	next int        // rotates tie-breaks between equally loaded servers
	// Version fencing (publish.go), under mu.
	pubPath    string
	pubVersion int64
	lo, hi     int64
	expectSet  bool

	stop context.CancelFunc
	done chan struct{}

	upd  sync.Mutex // serialises weight updates (Publish, UpdateWeights)
	life context.Context
}

type backend struct {
	url string
	// Guarded by Client.mu.
	inFlight int
	up       bool
	retryAt  time.Time
	backoff  time.Duration
	served   int64
	// version is the weight version confirmed by the last UpdateWeights
	// (-1 before one): a call's version when the answer names none.
	version int64
	// fenced keeps calls off the server while its weights change, and after
	// an update that failed until one succeeds.
	fenced bool
	// updates counts weight updates begun on the server: a health answer
	// sent before one began says nothing of the weights after it.
	updates uint64
	// instance is the server process last seen (instanceHeader; "" before
	// the first answer, and for engines that send none).
	instance string
}

// New returns a client over the servers' base URLs (e.g.
// "http://127.0.0.1:8000"; a trailing "/v1" is accepted). It probes them in
// the background until ctx ends or Close is called. Servers start up, so a
// first call need not wait for a probe.
func New(ctx context.Context, servers []string, opts Options) (*Client, error) {
	if len(servers) == 0 {
		return nil, errors.New("openai: no servers")
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Minute
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 2 * time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 2 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 250 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.MaxConcurrency <= 0 {
		opts.MaxConcurrency = 256
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 64 << 20
	}
	switch opts.API {
	case "":
		opts.API = APIOpenAI
	case APIOpenAI, APIVLLM, APISGLang:
	default:
		return nil, fmt.Errorf("openai: api %q: want %q, %q or %q", opts.API, APIOpenAI, APIVLLM, APISGLang)
	}
	if opts.ReloadMethod == "" {
		opts.ReloadMethod = "reload_weights"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxOutage <= 0 {
		opts.MaxOutage = 600 * time.Second
	}
	hc := opts.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = opts.MaxConcurrency // reuse connections under a full group of calls
		hc = &http.Client{Transport: tr}
	}
	c := &Client{opts: opts, hc: hc, log: opts.Logger, done: make(chan struct{})}
	for _, s := range servers {
		u := strings.TrimSuffix(strings.TrimSuffix(s, "/"), "/v1")
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("openai: server %q: want an http:// or https:// URL", s)
		}
		c.backends = append(c.backends, &backend{url: u, up: true, backoff: opts.MinBackoff, version: -1})
	}
	pctx, cancel := context.WithCancel(ctx)
	c.stop, c.life = cancel, pctx
	go c.probeLoop(pctx)
	return c, nil
}

// Close stops the prober and waits for it.
func (c *Client) Close() {
	c.stop()
	<-c.done
}

// Generate sends each request as its own /v1/completions call (n=1, with
// the request's seed, so every sample stays reproducible on its own), or,
// with Options.GroupByPrompt, one call with n=k per run of k requests that
// share prompt and sampling parameters. Calls run at once up to
// MaxConcurrency. On the first failure the others are cancelled and the
// failure of the lowest-indexed request is returned.
func (c *Client) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	out := make([]gen.Result, len(reqs))
	groups := c.group(reqs)
	errs := make([]error, len(groups))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, c.opts.MaxConcurrency)
	var wg sync.WaitGroup
	for gi, g := range groups {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[gi] = &Error{Class: failure.Infra, Err: ctx.Err()}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := c.call(ctx, &reqs[g[0]], len(g))
			if err != nil {
				errs[gi] = err
				cancel()
				return
			}
			for k, i := range g {
				out[i] = res[k]
			}
		})
	}
	wg.Wait()
	var first error
	for gi, err := range errs {
		if err == nil {
			continue
		}
		// A call cancelled because another one failed is not the story.
		if first == nil || (errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = fmt.Errorf("request %d: %w", groups[gi][0], err)
		}
	}
	if first != nil {
		return nil, first
	}
	return out, nil
}

// group returns the calls to make as lists of request indices. Without
// GroupByPrompt every request is its own call; with it, requests equal but
// for their seed share one call (its seed is the first one's, and the
// server derives each choice's seed from it).
func (c *Client) group(reqs []gen.Request) [][]int {
	groups := make([][]int, 0, len(reqs))
	if !c.opts.GroupByPrompt {
		for i := range reqs {
			groups = append(groups, []int{i})
		}
		return groups
	}
	byKey := map[string]int{}
	for i := range reqs {
		r := &reqs[i]
		key := fmt.Sprint(r.MaxTokens, r.Temperature, r.TopP, r.TopK, r.Stop, r.Prompt)
		if gi, ok := byKey[key]; ok {
			groups[gi] = append(groups[gi], i)
			continue
		}
		byKey[key] = len(groups)
		groups = append(groups, []int{i})
	}
	return groups
}

// completionRequest is what vLLM and longhaul serve both accept.
type completionRequest struct {
	Model                  string  `json:"model,omitempty"`
	Prompt                 []int32 `json:"prompt"`
	MaxTokens              int     `json:"max_tokens"`
	Temperature            float32 `json:"temperature"`
	TopP                   float32 `json:"top_p"`
	TopK                   int     `json:"top_k"`
	Seed                   int64   `json:"seed"`
	StopTokenIDs           []int32 `json:"stop_token_ids,omitempty"`
	Logprobs               int     `json:"logprobs"`
	ReturnTokenIDs         bool    `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids"`
	// IgnoreEOS (vLLM's extension) leaves the stops to StopTokenIDs: a
	// gen.Request's Stop list is the whole set, the same as in process.
	IgnoreEOS bool `json:"ignore_eos"`
	N         int  `json:"n"`
}

type completionResponse struct {
	Choices []struct {
		Index          int             `json:"index"`
		FinishReason   *string         `json:"finish_reason"`
		TokenIDs       []int32         `json:"token_ids"`
		PromptTokenIDs []int32         `json:"prompt_token_ids"`
		Logprobs       *choiceLogprobs `json:"logprobs"`
	} `json:"choices"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	WeightVersion  *int64  `json:"weight_version"`
}

// call runs one request, moving to another server when one refuses the
// connection (a sample is a pure function of its seed, so resending is
// safe even if the dead server had started on it).
func (c *Client) call(ctx context.Context, r *gen.Request, n int) ([]gen.Result, error) {
	topP := r.TopP
	if topP <= 0 || topP > 1 {
		topP = 1
	}
	route, body, err := c.encodeRequest(r, n, topP)
	if err != nil {
		return nil, &Error{Class: failure.Data, Err: fmt.Errorf("encode request: %w", err)}
	}
	tried := map[*backend]bool{}
	var lastErr error
	var outage time.Time
	for {
		b := c.pick(tried)
		if b == nil {
			// No server can take the call: an outage is waited out (up
			// to MaxOutage), not charged to the rollout.
			if outage.IsZero() {
				outage = time.Now()
			}
			if c.waitForServer(ctx, outage) {
				clear(tried)
				continue
			}
			if lastErr == nil {
				lastErr = &Error{Class: failure.Infra, Err: errors.New("no generation server is up to date and up")}
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("the call ended (%w) after waiting %v for a server: %w", ctx.Err(), time.Since(outage).Round(time.Second), lastErr)
			}
			return nil, fmt.Errorf("no server for %v (rollout_failure.max_outage_s): %w", time.Since(outage).Round(time.Second), lastErr)
		}
		tried[b] = true
		t0 := time.Now()
		res, answered, err := c.post(ctx, b, route, body, r, n)
		if c.opts.OnCall != nil {
			c.opts.OnCall(b.url, time.Since(t0), err)
		}
		c.release(b, answered)
		var e0 *Error
		if answered && errors.Is(err, ErrVersion) {
			// Stale (a restart's initial weights): reachable, so not down
			// with a backoff; checkServed took it out of the rotation and
			// the prober re-publishes to it at its next round.
			lastErr = err
			continue
		}
		if answered && errors.As(err, &e0) && e0.Status == http.StatusServiceUnavailable {
			// Loading or overloaded: not this call's fault; try another
			// server or wait for one.
			c.markDown(b, err)
			lastErr = err
			continue
		}
		if answered {
			// An answer proves the server is up: do not wait for a probe.
			c.markUp(b)
		}
		if err == nil || answered || ctx.Err() != nil {
			return res, err
		}
		var e *Error
		if errors.As(err, &e) && errors.Is(e.Err, context.DeadlineExceeded) {
			return res, err // slow, not dead: its deadline is the caller's answer
		}
		c.markDown(b, err)
		lastErr = err
	}
}

// post sends one call to b. answered reports whether b sent a response
// status (so a failure is about the call, not about reaching b).
func (c *Client) post(ctx context.Context, b *backend, route string, body []byte, r *gen.Request, n int) ([]gen.Result, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	infra := func(status int, err error) *Error {
		return &Error{Class: failure.Infra, Status: status, Server: b.url, Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+route, bytes.NewReader(body))
	if err != nil {
		return nil, false, &Error{Class: failure.Data, Server: b.url, Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, infra(0, fmt.Errorf("completions: %w", ctx.Err()))
		}
		return nil, false, infra(0, fmt.Errorf("completions: %w", err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil || failure.IsInfra(err) {
			return nil, true, infra(resp.StatusCode, fmt.Errorf("read response: %w", err))
		}
		// Any other read error (e.g. a body over a broken chunked encoding)
		// is a broken answer; a body cut short is infra (isInfra).
		return nil, true, dataErr(b.url, resp.StatusCode, "read response: %w", err)
	}
	if int64(len(raw)) > c.opts.MaxResponseBytes {
		return nil, true, dataErr(b.url, resp.StatusCode, "response exceeds %d bytes", c.opts.MaxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, true, &Error{Class: failure.Status(resp.StatusCode), Status: resp.StatusCode, Server: b.url,
			Err: fmt.Errorf("completions: %s", errorMessage(raw))}
	}
	res, version, err := c.decodeResponse(raw, r, n)
	if err != nil {
		return nil, true, dataErr(b.url, resp.StatusCode, "%w", err)
	}
	if h := resp.Header.Get(versionHeader); h != "" {
		if version, err = strconv.ParseInt(h, 10, 64); err != nil {
			return nil, true, dataErr(b.url, resp.StatusCode, "bad %s header %q", versionHeader, h)
		}
	}
	if version, err = c.checkServed(b, version, resp.Header.Get(instanceHeader)); err != nil {
		return nil, true, err
	}
	for i := range res {
		if res[i].Finish == "abort" {
			return nil, true, infra(resp.StatusCode, errors.New("server aborted the request"))
		}
		res[i].Version = version
	}
	return res, true, nil
}

// errorMessage pulls the message out of an OpenAI error body.
func errorMessage(raw []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	if len(raw) > 200 {
		raw = raw[:200]
	}
	return strings.TrimSpace(string(raw))
}

// parse checks the answer's contract: n choices with indices 0..n-1, token
// ids (from token_ids, else from "token_id:N" logprob tokens), one logprob
// per token, and the prompt echoed back as sent when the server echoes it.
// The version is the body's weight_version, -1 when absent.
func parse(raw []byte, r *gen.Request, n int) ([]gen.Result, int64, error) {
	var cr completionResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return nil, 0, fmt.Errorf("decode response: %w", err)
	}
	if len(cr.Choices) != n {
		return nil, 0, fmt.Errorf("want %d choices, got %d", n, len(cr.Choices))
	}
	out := make([]gen.Result, n)
	seen := make([]bool, n)
	for k := range cr.Choices {
		ch := &cr.Choices[k]
		if ch.Index < 0 || ch.Index >= n || seen[ch.Index] {
			return nil, 0, fmt.Errorf("choice %d has index %d", k, ch.Index)
		}
		seen[ch.Index] = true
		prompt := ch.PromptTokenIDs
		if prompt == nil {
			prompt = cr.PromptTokenIDs
		}
		res, err := parseChoice(ch.TokenIDs, prompt, ch.Logprobs, ch.FinishReason, r)
		if err != nil {
			return nil, 0, fmt.Errorf("choice %d: %w", ch.Index, err)
		}
		out[ch.Index] = res
	}
	version := int64(-1)
	if cr.WeightVersion != nil {
		version = *cr.WeightVersion
	}
	return out, version, nil
}

type choiceLogprobs = struct {
	Tokens        []string   `json:"tokens"`
	TokenLogprobs []*float32 `json:"token_logprobs"`
}

func parseChoice(toks, prompt []int32, lp *choiceLogprobs, finishReason *string, r *gen.Request) (gen.Result, error) {
	if lp == nil {
		return gen.Result{}, errors.New("response has no logprobs")
	}
	if toks == nil {
		toks = make([]int32, len(lp.Tokens))
		for i, s := range lp.Tokens {
			id, ok := strings.CutPrefix(s, "token_id:")
			n, err := strconv.ParseInt(id, 10, 32)
			if !ok || err != nil {
				return gen.Result{}, fmt.Errorf("response has no token_ids and logprob token %d is %q, not token_id:N", i, s)
			}
			toks[i] = int32(n)
		}
	}
	if len(lp.TokenLogprobs) != len(toks) {
		return gen.Result{}, fmt.Errorf("%d token ids but %d logprobs", len(toks), len(lp.TokenLogprobs))
	}
	if len(lp.Tokens) != 0 && len(lp.Tokens) != len(toks) {
		return gen.Result{}, fmt.Errorf("%d token ids but %d logprob tokens", len(toks), len(lp.Tokens))
	}
	if len(toks) > r.MaxTokens {
		return gen.Result{}, fmt.Errorf("%d tokens exceed max_tokens %d", len(toks), r.MaxTokens)
	}
	lps := make([]float32, len(toks))
	for i, v := range lp.TokenLogprobs {
		if v == nil {
			return gen.Result{}, fmt.Errorf("logprob %d is null", i)
		}
		lps[i] = *v
	}
	if prompt != nil && !slices.Equal(prompt, r.Prompt) {
		return gen.Result{}, fmt.Errorf("server saw a %d-token prompt, not the %d tokens sent", len(prompt), len(r.Prompt))
	}
	if finishReason == nil {
		return gen.Result{}, errors.New("response has no finish_reason")
	}
	switch *finishReason {
	case "stop", "length", "abort":
	default:
		return gen.Result{}, fmt.Errorf("unknown finish_reason %q", *finishReason)
	}
	if toks == nil {
		toks = []int32{}
	}
	return gen.Result{Tokens: toks, Logprobs: lps, Finish: *finishReason}, nil
}
