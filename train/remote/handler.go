// Package remote is the trainer protocol over HTTP: Handler serves any
// train.Trainer, New drives one. docs/serving.md ("Trainer protocol") is
// the specification; a GPU trainer in another language implements the same
// six routes.
package remote

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"

	"github.com/longhaul-rl/longhaul/train"

	"github.com/longhaul-rl/longhaul/internal/allowpath"
)

// ErrInvalid marks a trainer error caused by its input (a bad batch, a
// checkpoint directory that is not empty): the handler answers 422 and the
// client reports a data error. Other trainer errors answer 500 (infra). It
// is train.ErrInvalidInput, so a trainer need not import this package.
var ErrInvalid = train.ErrInvalidInput

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// APIKey, when set, is required as a bearer token except on /health.
	APIKey string
	// MaxBodyBytes bounds a train_step payload (default 1 GiB).
	MaxBodyBytes int64
	Logger       *slog.Logger
	// AllowPaths confines the paths of save_checkpoint, load_checkpoint
	// and export_weights to its directories (422 outside); nil allows any
	// (library use; the command always sets it).
	AllowPaths *allowpath.Set
}

// Handler serves t with default options.
func Handler(t train.Trainer) http.Handler { return NewHandler(t, HandlerOptions{}) }

// NewHandler serves t. Calls reach t one at a time, in arrival order:
// trainers are stateful, and the protocol has no concurrent steps.
func NewHandler(t train.Trainer, opts HandlerOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 30
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{t: t, opts: opts, turn: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/train_step", h.trainStep)
	mux.HandleFunc("POST /v1/warm_step", h.warmStep) // warm.go
	mux.HandleFunc("POST /v1/save_checkpoint", h.dirCall(func(ctx context.Context, a string) error { return t.SaveCheckpoint(ctx, a) }, "dir", h.emptyDir))
	mux.HandleFunc("POST /v1/load_checkpoint", h.dirCall(func(ctx context.Context, a string) error { return t.LoadCheckpoint(ctx, a) }, "dir", h.checkpointSource))
	mux.HandleFunc("POST /v1/export_weights", h.dirCall(func(ctx context.Context, a string) error { return t.ExportWeights(ctx, a) }, "path", h.weightsTarget))
	mux.HandleFunc("GET /v1/state", h.state)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("unknown route %s %s", r.Method, r.URL.Path))
	})
	h.mux = mux
	return h
}

type handler struct {
	t    train.Trainer
	opts HandlerOptions
	mux  *http.ServeMux
	turn chan struct{} // a one-slot semaphore that, unlike a mutex, gives up when the request does
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.opts.APIKey != "" && r.URL.Path != "/health" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.APIKey)) != 1 {
			writeErr(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
			return
		}
	}
	if r.ContentLength > h.opts.MaxBodyBytes {
		writeErr(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body of %d bytes exceeds %d", r.ContentLength, h.opts.MaxBodyBytes))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	h.mux.ServeHTTP(w, r)
}

// acquire waits for the trainer's turn.
func (h *handler) acquire(ctx context.Context) error {
	select {
	case h.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *handler) release() { <-h.turn }

// fail answers a trainer or context error.
func (h *handler) fail(w http.ResponseWriter, op string, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeErr(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
	case errors.Is(err, ErrInvalid), errors.Is(err, train.ErrInvalidBatch):
		writeErr(w, http.StatusUnprocessableEntity, "invalid", fmt.Sprintf("%s: %v", op, err))
	default:
		h.opts.Logger.Error("trainer call failed", "op", op, "err", err)
		writeErr(w, http.StatusInternalServerError, "trainer_error", fmt.Sprintf("%s: %v", op, err))
	}
}

// readBatch reads a batch payload, decodes it and validates the batch,
// then waits for the trainer's turn; false means it has answered (400,
// 413, or the request gave up), true that the caller holds the turn.
func (h *handler) readBatch(w http.ResponseWriter, r *http.Request, op string, decode func([]byte) (train.Batch, error)) (train.Batch, bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		h.fail(w, "read batch", err)
		return train.Batch{}, false
	}
	b, err := decode(body)
	if err == nil {
		err = train.ValidateBatch(b)
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, "bad_batch", err.Error())
		return train.Batch{}, false
	}
	if err := h.acquire(r.Context()); err != nil {
		h.fail(w, op, err)
		return train.Batch{}, false
	}
	return b, true
}

func (h *handler) trainStep(w http.ResponseWriter, r *http.Request) {
	var expect int64
	b, ok := h.readBatch(w, r, "train_step", func(p []byte) (b train.Batch, err error) {
		b, expect, err = decodeBatch(p)
		return b, err
	})
	if !ok {
		return
	}
	defer h.release()
	// The fence that makes a retried step safe: a step already applied
	// moved the trainer past expect_step.
	if expect >= 0 && !h.fenced(w, r, "the batch", expect, -1) {
		return
	}
	st, err := h.t.TrainStep(r.Context(), b)
	if err != nil {
		h.fail(w, "train_step", err)
		return
	}
	writeJSON(w, http.StatusOK, toWire(st))
}

// dirCall serves save_checkpoint, load_checkpoint and export_weights:
// {field: "...", "expect_step": N, "expect_warm_step": W}, the expect_
// keys optional. With them the trainer answers 409 step_conflict, doing
// nothing, unless it stands at that step (and warm-start step): a trainer
// restarted after the client last checked must not save or export its
// fresh state as the run's.
func (h *handler) dirCall(call func(context.Context, string) error, field string, check func(string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				h.fail(w, r.URL.Path, err)
				return
			}
			writeErr(w, http.StatusBadRequest, "bad_json", err.Error())
			return
		}
		var val string
		if raw, ok := req[field]; ok {
			if err := json.Unmarshal(raw, &val); err != nil {
				writeErr(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("%q must be a string", field))
				return
			}
		}
		if val == "" {
			writeErr(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("%q is required", field))
			return
		}
		expect, expectWarm := int64(-1), int64(-1)
		for key, dst := range map[string]*int64{"expect_step": &expect, "expect_warm_step": &expectWarm} {
			if raw, ok := req[key]; ok {
				if err := json.Unmarshal(raw, dst); err != nil || *dst < 0 {
					writeErr(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("%q must be a step (an integer ≥ 0)", key))
					return
				}
			}
		}
		if err := check(val); err != nil {
			writeErr(w, http.StatusUnprocessableEntity, "invalid_target", fmt.Sprintf("%s: %v", field, err))
			return
		}
		if err := h.acquire(r.Context()); err != nil {
			h.fail(w, r.URL.Path, err)
			return
		}
		defer h.release()
		if expect >= 0 && !h.fenced(w, r, "the call", expect, expectWarm) {
			return
		}
		if err := call(r.Context(), val); err != nil {
			h.fail(w, strings.TrimPrefix(r.URL.Path, "/v1/"), err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	}
}

// fenced reports whether the trainer stands at step (and, when warm ≥ 0,
// at that warm-start step); if not it answers 409 step_conflict, saying
// what (the batch, the call) expected the step.
func (h *handler) fenced(w http.ResponseWriter, r *http.Request, what string, step, warm int64) bool {
	st, err := h.t.State(r.Context())
	if err != nil {
		h.fail(w, "state", err)
		return false
	}
	if warm < 0 {
		if st.Step == step {
			return true
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": errBody{Code: "step_conflict",
			Message: fmt.Sprintf("trainer is at step %d, %s expects step %d", st.Step, what, step)},
			"step": st.Step, "version": st.Version})
		return false
	}
	var done int64
	if wt, ok := h.t.(Warmer); ok {
		done = int64(wt.WarmDone())
	}
	if st.Step == step && done == warm {
		return true
	}
	writeJSON(w, http.StatusConflict, map[string]any{"error": errBody{Code: "step_conflict",
		Message: fmt.Sprintf("trainer is at step %d (warm-start step %d), %s expects step %d", st.Step, done, what, step)},
		"step": st.Step, "version": st.Version, "warm_step": done})
	return false
}

func (h *handler) state(w http.ResponseWriter, r *http.Request) {
	if err := h.acquire(r.Context()); err != nil {
		h.fail(w, "state", err)
		return
	}
	defer h.release()
	st, err := h.t.State(r.Context())
	if err != nil {
		h.fail(w, "state", err)
		return
	}
	ws := wireState{Step: st.Step, Version: st.Version}
	if wt, ok := h.t.(Warmer); ok {
		ws.WarmStep = wt.WarmDone()
	}
	writeJSON(w, http.StatusOK, ws)
}

type errBody struct {
	Message string `json:"message"`
	Code    string `json:"code"`
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]errBody{"error": {Message: msg, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"response encoding failed","code":"internal"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

type wireState struct {
	Step    int64 `json:"step"`
	Version int64 `json:"version"`
	// WarmStep is the number of warm-start steps taken (warm.go); a
	// trainer without warm steps omits it.
	WarmStep int `json:"warm_step,omitempty"`
}

// wireStats is StepStats on the wire. Floats go through jfloat because a
// diverged step's NaN loss must arrive as NaN, and JSON has no NaN.
type wireStats struct {
	Step     int64  `json:"step"`
	Version  int64  `json:"version"`
	Loss     jfloat `json:"loss"`
	GradNorm jfloat `json:"grad_norm"`
	LR       jfloat `json:"lr"`
	ClipFrac jfloat `json:"clip_frac"`
	Tokens   int    `json:"tokens"`
	// Diagnostics is optional: a trainer that computes none omits it.
	Diagnostics *wireDiag `json:"diagnostics,omitempty"`
}

// wireDiag is train.Diagnostics on the wire (jfloat for the same reason).
type wireDiag struct {
	Entropy        jfloat `json:"entropy"`
	KLRef          jfloat `json:"kl_ref"`
	KLSampler      jfloat `json:"kl_sampler"`
	ClipLowFrac    jfloat `json:"clip_low_frac"`
	ClipHighFrac   jfloat `json:"clip_high_frac"`
	LogprobAbsDiff jfloat `json:"logprob_abs_diff"`
	RatioP05       jfloat `json:"ratio_p05"`
	RatioP50       jfloat `json:"ratio_p50"`
	RatioP95       jfloat `json:"ratio_p95"`
	RatioMax       jfloat `json:"ratio_max"`
}

func toWire(s train.StepStats) wireStats {
	d := s.Diag
	return wireStats{s.Step, s.Version, jfloat(s.Loss), jfloat(s.GradNorm), jfloat(s.LR), jfloat(s.ClipFrac), s.Tokens,
		&wireDiag{jfloat(d.Entropy), jfloat(d.KLRef), jfloat(d.KLSampler), jfloat(d.ClipLowFrac), jfloat(d.ClipHighFrac),
			jfloat(d.LogprobAbsDiff), jfloat(d.RatioP05), jfloat(d.RatioP50), jfloat(d.RatioP95), jfloat(d.RatioMax)}}
}

func (w wireStats) stats() train.StepStats {
	st := train.StepStats{Step: w.Step, Version: w.Version, Loss: float64(w.Loss), GradNorm: float64(w.GradNorm),
		LR: float64(w.LR), ClipFrac: float64(w.ClipFrac), Tokens: w.Tokens}
	if d := w.Diagnostics; d != nil {
		st.Diag = train.Diagnostics{Entropy: float64(d.Entropy), KLRef: float64(d.KLRef), KLSampler: float64(d.KLSampler),
			ClipLowFrac: float64(d.ClipLowFrac), ClipHighFrac: float64(d.ClipHighFrac), LogprobAbsDiff: float64(d.LogprobAbsDiff),
			RatioP05: float64(d.RatioP05), RatioP50: float64(d.RatioP50), RatioP95: float64(d.RatioP95), RatioMax: float64(d.RatioMax)}
	}
	return st
}

// jfloat is a float64 that writes non-finite values as the strings "NaN",
// "Infinity" and "-Infinity" (the spelling Python's json uses).
type jfloat float64

func (f jfloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Infinity"`), nil
	}
	return json.Marshal(v)
}

func (f *jfloat) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "NaN":
			*f = jfloat(math.NaN())
		case "Infinity":
			*f = jfloat(math.Inf(1))
		case "-Infinity":
			*f = jfloat(math.Inf(-1))
		default:
			return fmt.Errorf("bad float %q", s)
		}
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = jfloat(v)
	return nil
}
