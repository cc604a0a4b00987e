// Package server serves a gen.Generator over an OpenAI-compatible HTTP API
// (the legacy completions and chat completions endpoints, with the vLLM
// token-id extensions that RL needs) plus an SGLang-shaped weight reload.
//
// The server owns the weight-swap discipline: generation holds a read lock
// and a reload holds the write lock, so no request ever runs on a
// half-swapped model, and the version a response reports is the version that
// produced it.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longhaul-rl/longhaul/gen"

	"github.com/longhaul-rl/longhaul/internal/allowpath"
)

// VersionHeader carries the served weight version on every response.
const VersionHeader = "X-Longhaul-Weight-Version"

// InstanceHeader names the server process on every response: a value drawn
// when the server starts. A client that sees it change knows the server was
// restarted and serves whatever it loaded at start, whatever version number
// it reports (a `serve --model DIR` labels DIR version 0, as a run labels
// its warm-started weights), so it publishes the current weights to it
// again before trusting its answers (gen/openai).
const InstanceHeader = "X-Longhaul-Server-Instance"

// WeightLoader swaps the served weights. The server calls Reload only while
// no generation is running.
type WeightLoader interface {
	Reload(ctx context.Context, path string) (version int64, err error)
}

// WeightPreparer is a WeightLoader that can do the slow part (reading and
// checking the file) while generation goes on: Prepare runs outside the
// server's lock and returns swap, which the server calls under its write
// lock to put the prepared weights in place and which returns their
// version.
type WeightPreparer interface {
	Prepare(ctx context.Context, path string) (swap func() int64, err error)
}

// Scorer returns the raw next-token logits of every position of toks,
// (len(toks), V) row-major (row t scores token t+1), under the weights
// being served: the server calls it under the same read lock as the
// generation it annotates, so both see one version.
type Scorer interface {
	Logits(ctx context.Context, toks []int32) ([]float32, error)
}

// Backend is what the server serves.
type Backend struct {
	// Gen must be safe for concurrent use: the server calls it from many
	// requests at once (never during a Reload).
	Gen gen.Generator
	// Loader swaps weights; nil disables /update_weights_from_disk (501).
	Loader WeightLoader
	// Scorer gives the served model's full next-token distribution, for
	// top_logprobs and prompt_logprobs; nil answers those with 400.
	Scorer Scorer
	// Model is the served model name (the "model" field clients send).
	Model string
	// Version reports the currently loaded weight version; nil means the
	// generator's Result.Version (and -1 where no generation ran).
	Version func() int64
	// MaxModelLen bounds prompt + max_tokens; 0 leaves it unchecked.
	MaxModelLen int
	// Text is the model's tokenizer, chat template and tool-call parser
	// (ByteText for the byte model; runner.HFBackend for a Hugging Face
	// directory): every route that takes or gives text goes through it.
	Text *Text
	// Defaults are the model's sampling defaults (generation_config.json).
	Defaults Defaults
	// TokenIDs, set instead of Text, serves a model whose directory has no
	// tokenizer: only token-id prompts, ids below Vocab; text prompts,
	// stop strings, chat, /tokenize and /detokenize answer 400;
	// completions carry no text.
	TokenIDs *TokenIDs
}

// TokenIDs describes a model served by token ids only.
type TokenIDs struct {
	Vocab int     // ids are in [0, Vocab)
	Stop  []int32 // default stop ids (eos), unless ignore_eos
}

// Options configure a Server.
type Options struct {
	// APIKey, when set, is required as "Authorization: Bearer KEY" on
	// every route except /health and /metrics (probes and scrapers).
	APIKey string
	// MaxBodyBytes bounds request bodies (413 beyond); 0 means 1 MiB.
	MaxBodyBytes int64
	// MaxN bounds n (and prompts × n); 0 means 256.
	MaxN int
	// Loading starts the server in the loading state (503 on generation
	// and /health) until SetLoading(false).
	Loading bool
	Logger  *slog.Logger
	// Now is the clock for "created" fields; nil means time.Now.
	Now func() time.Time
	// AllowPaths confines model_path of a reload to its directories
	// (403 outside); nil allows any path (library use; the command always
	// sets it).
	AllowPaths *allowpath.Set
}

// Server is the HTTP handler. Create it with New.
type Server struct {
	be      Backend
	opts    Options
	log     *slog.Logger
	mu      sync.RWMutex // read: a generation in flight; write: a reload
	loading atomic.Bool
	idSeq   atomic.Uint64
	// instance is this process's InstanceHeader value.
	instance string
	metrics  *metrics
	routes   map[string]map[string]http.HandlerFunc // path -> method -> handler
	gate     gate                                   // pause/resume (engines.go)
	txt      *vocab                                 // be.Text prepared; nil: token ids only
}

// New returns a server over b.
func New(b Backend, opts Options) (*Server, error) {
	if b.Gen == nil {
		return nil, errors.New("server: backend has no generator")
	}
	if b.Model == "" {
		return nil, errors.New("server: backend has no model name")
	}
	if (b.Text == nil) == (b.TokenIDs == nil) {
		return nil, errors.New("server: backend needs exactly one of Text (a tokenizer and chat template) and TokenIDs")
	}
	var txt *vocab
	if b.Text != nil {
		var err error
		if txt, err = newVocab(*b.Text); err != nil {
			return nil, err
		}
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.MaxN <= 0 {
		opts.MaxN = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{be: b, opts: opts, log: opts.Logger, metrics: newMetrics(b.Model), instance: rand.Text(), txt: txt}
	s.loading.Store(opts.Loading)
	s.routes = map[string]map[string]http.HandlerFunc{
		"/v1/completions":           {http.MethodPost: s.handleCompletions},
		"/v1/chat/completions":      {http.MethodPost: s.handleChat},
		"/v1/models":                {http.MethodGet: s.handleModels},
		"/tokenize":                 {http.MethodPost: s.handleTokenize},
		"/detokenize":               {http.MethodPost: s.handleDetokenize},
		"/health":                   {http.MethodGet: s.handleHealth},
		"/metrics":                  {http.MethodGet: s.handleMetrics},
		"/update_weights_from_disk": {http.MethodPost: s.handleReload},
	}
	s.addEngineRoutes()
	return s, nil
}

// SetLoading switches the loading state (503 while loading).
func (s *Server) SetLoading(v bool) { s.loading.Store(v) }

// version reads the backend's version. Callers that report it for a
// generation hold s.mu so it cannot change under them.
func (s *Server) version() int64 {
	if s.be.Version == nil {
		return -1
	}
	return s.be.Version()
}

// statusWriter records the status for metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ServeHTTP routes, authenticates and limits the request, and records it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	sw.Header().Set(InstanceHeader, s.instance)
	byMethod, ok := s.routes[r.URL.Path]
	endpoint := r.URL.Path
	if !ok {
		endpoint = "other" // unbounded label values would blow up /metrics
	}
	s.metrics.running.Inc()
	defer func() {
		s.metrics.running.Dec()
		s.metrics.observe(endpoint, sw.status, time.Since(start))
	}()
	if !ok {
		writeError(sw, s.version(), http.StatusNotFound, "invalid_request_error", "", "unknown_url",
			fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
		return
	}
	h, ok := byMethod[r.Method]
	if !ok {
		allow := make([]string, 0, len(byMethod))
		for m := range byMethod {
			allow = append(allow, m)
		}
		sw.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(sw, s.version(), http.StatusMethodNotAllowed, "invalid_request_error", "", "method_not_allowed",
			fmt.Sprintf("Method %s not allowed for %s.", r.Method, r.URL.Path))
		return
	}
	if s.opts.APIKey != "" && r.URL.Path != "/health" && r.URL.Path != "/metrics" && !s.authorized(r) {
		writeError(sw, s.version(), http.StatusUnauthorized, "authentication_error", "", "invalid_api_key",
			"Incorrect API key provided.")
		return
	}
	if r.ContentLength > s.opts.MaxBodyBytes {
		writeError(sw, s.version(), http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
			fmt.Sprintf("Request body of %d bytes exceeds the limit of %d bytes.", r.ContentLength, s.opts.MaxBodyBytes))
		return
	}
	r.Body = http.MaxBytesReader(sw, r.Body, s.opts.MaxBodyBytes)
	h(sw, r)
}

func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.APIKey)) == 1
}

// decode reads a JSON body into v, answering 413 or 400 itself; it reports
// whether the handler should go on.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, s.version(), http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
				fmt.Sprintf("Request body exceeds the limit of %d bytes.", tooBig.Limit))
			return false
		}
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "", "invalid_json",
			"We could not parse the JSON body of your request: "+err.Error())
		return false
	}
	// Drain the rest so net/http watches the connection and cancels the
	// request's context (and its generation) when the client goes away.
	_, _ = io.Copy(io.Discard, r.Body)
	return true
}

// apiError is the OpenAI error envelope.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, version int64, status int, typ, param, code, msg string) {
	var e apiError
	e.Error.Message, e.Error.Type = msg, typ
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	writeJSON(w, version, status, e)
}

func writeJSON(w http.ResponseWriter, version int64, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; a failure is a bug.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"response encoding failed","type":"server_error","param":null,"code":null}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(VersionHeader, strconv.FormatInt(version, 10))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// paramError is a request field with a bad value (400 with param set).
type paramError struct{ param, msg string }

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, args ...any) *paramError {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) writeParamError(w http.ResponseWriter, err error) {
	var pe *paramError
	if errors.As(err, &pe) {
		if pe.param == "model" {
			writeError(w, s.version(), http.StatusNotFound, "invalid_request_error", "model", "model_not_found", pe.msg)
			return
		}
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", pe.param, "invalid_value", pe.msg)
		return
	}
	writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "", "", err.Error())
}

func (s *Server) checkModel(m string) error {
	if m != "" && m != s.be.Model {
		return badParam("model", "The model `%s` does not exist; this server serves `%s`.", m, s.be.Model)
	}
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.loading.Load() {
		writeError(w, s.version(), http.StatusServiceUnavailable, "service_unavailable", "", "model_loading", "The model is loading.")
		return
	}
	writeJSON(w, s.version(), http.StatusOK, map[string]any{"status": "ok", "version": s.version()})
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		MaxModelLen int    `json:"max_model_len,omitempty"`
		Version     int64  `json:"weight_version"`
	}
	v := s.version()
	writeJSON(w, v, http.StatusOK, map[string]any{
		"object": "list",
		"data": []model{{ID: s.be.Model, Object: "model", Created: s.opts.Now().Unix(), OwnedBy: "longhaul",
			MaxModelLen: s.be.MaxModelLen, Version: v}},
	})
}

func (s *Server) handleReload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelPath     string  `json:"model_path"`
		WeightVersion *string `json:"weight_version"` // SGLang: the version the caller expects
	}
	if !s.decode(w, r, &req) {
		return
	}
	if req.ModelPath == "" {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "model_path", "missing_required_parameter",
			"model_path is required.")
		return
	}
	if s.be.Loader == nil {
		writeError(w, s.version(), http.StatusNotImplemented, "invalid_request_error", "", "not_implemented",
			"This server cannot reload weights.")
		return
	}
	if s.opts.AllowPaths != nil {
		if _, err := s.opts.AllowPaths.Check(req.ModelPath); err != nil {
			writeError(w, s.version(), http.StatusForbidden, "invalid_request_error", "model_path", "path_not_allowed", err.Error())
			return
		}
	}
	var v, cur int64
	var err error
	if p, ok := s.be.Loader.(WeightPreparer); ok {
		// The file is read and checked while generation goes on; only the
		// swap holds the write lock, so a slow or hostile file never
		// blocks generation.
		var swap func() int64
		if swap, err = p.Prepare(r.Context(), req.ModelPath); err == nil {
			s.mu.Lock()
			v = swap()
			cur = s.version()
			s.mu.Unlock()
		} else {
			cur = s.version()
		}
	} else {
		// The write lock waits for in-flight generations and holds new
		// ones back, so the swap happens between requests.
		s.mu.Lock()
		v, err = s.be.Loader.Reload(r.Context(), req.ModelPath)
		cur = s.version()
		s.mu.Unlock()
	}
	if err != nil {
		s.log.Warn("weight reload failed", "path", req.ModelPath, "err", err)
		// SGLang answers a failed update with 400 and success=false.
		writeJSON(w, cur, http.StatusBadRequest, map[string]any{"success": false, "message": err.Error(), "version": cur})
		return
	}
	s.metrics.version.Set(float64(v))
	s.log.Info("weights reloaded", "path", req.ModelPath, "version", v)
	if req.WeightVersion != nil && *req.WeightVersion != strconv.FormatInt(v, 10) {
		// SGLang labels the weights with weight_version; here the label is
		// read from beside the weights, so a disagreement is a failed update.
		writeJSON(w, v, http.StatusBadRequest, map[string]any{"success": false, "version": v,
			"message": fmt.Sprintf("loaded weights are version %d, not the weight_version %q asked for", v, *req.WeightVersion)})
		return
	}
	// instance: the process that loaded these weights (InstanceHeader).
	writeJSON(w, v, http.StatusOK, map[string]any{"success": true,
		"message": fmt.Sprintf("Succeeded to update model weights from %s.", req.ModelPath), "version": v,
		"instance": s.instance})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.version.Set(float64(s.version()))
	w.Header().Set(VersionHeader, strconv.FormatInt(s.version(), 10))
	s.metrics.handler().ServeHTTP(w, r)
}

// generate runs one batched generator call under the read lock, returns
// the version that produced the results
// and hands them to use, still under the lock, so that what use computes
// from the served model (scoring) sees the same weights.
func (s *Server) generate(ctx context.Context, reqs []gen.Request, use func([]gen.Result) error) (int64, error) {
	if err := s.gate.wait(ctx); err != nil {
		return s.version(), err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := s.version()
	res, err := s.be.Gen.Generate(ctx, reqs)
	if err != nil {
		return v, fmt.Errorf("generate: %w", err)
	}
	if len(res) != len(reqs) {
		return v, fmt.Errorf("generate: %d results for %d requests", len(res), len(reqs))
	}
	if s.be.Version == nil && len(res) > 0 {
		// Without a version getter the generator's own word is all there is.
		v = res[0].Version
		for _, r := range res {
			if r.Version != v {
				return v, fmt.Errorf("generate: one batch answered by versions %d and %d", v, r.Version)
			}
		}
	}
	return v, use(res)
}

// newID returns a response id unique within this process.
func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, s.opts.Now().UnixNano(), s.idSeq.Add(1))
}
