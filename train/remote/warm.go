package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/train"
)

// The warm start over the protocol (docs/protocols.md, "Trainer protocol:
// the warm start"): POST /v1/warm_step takes a supervised batch (loss sft)
// and moves the trainer's weights with an AdamW of the warm start's own,
// leaving the RL state (step, version, RL moments) as it was, as the
// in-process warm start trains the same weights with a second trainer.
// Each step is fenced by its index, so a resent step is never applied
// twice and a trainer that restarted mid-way says where to resume.

// WarmSpec is one warm-start step: its index in the warm start, the
// number of steps, and the warm start's learning rate and linear warmup
// (the other optimizer settings are the trainer's own).
type WarmSpec struct {
	Index, Steps, WarmupSteps int
	LR                        float64
}

// WarmStats is the answer to a warm step.
type WarmStats struct {
	WarmStep int // steps taken, this one included
	Loss     float64
	GradNorm float64
	LR       float64
	Tokens   int
}

// ErrWarmConflict is in the chain of a warm step refused because the
// trainer has taken another number of warm steps than its index (a
// resent step that was applied, or a trainer restarted mid-way): read
// WarmState and resume from there.
var ErrWarmConflict = errors.New("trainer warm-start step conflict")

// ErrWarmAfterRL: the trainer has taken RL steps; a warm start runs only
// before the first.
var ErrWarmAfterRL = errors.New("warm start after RL steps")

// Warmer is a trainer that can take warm-start steps (the handler serves
// /v1/warm_step for it; other trainers answer 501).
type Warmer interface {
	// WarmStep applies step s.Index; the handler has checked that it is
	// WarmDone() and that the trainer is at RL step 0.
	WarmStep(ctx context.Context, s WarmSpec, b train.Batch) (WarmStats, error)
	// WarmDone is the number of warm steps taken since the trainer started
	// (0 again after a LoadCheckpoint).
	WarmDone() int
}

func (s WarmSpec) validate() error {
	switch {
	case s.Index < 0 || s.Steps <= 0 || s.Index >= s.Steps:
		return fmt.Errorf("warm_index %d: want 0 <= warm_index < warm_steps (%d)", s.Index, s.Steps)
	case s.WarmupSteps < 0:
		return fmt.Errorf("warmup_steps %d: want >= 0", s.WarmupSteps)
	case !(s.LR > 0) || math.IsInf(s.LR, 0):
		return fmt.Errorf("lr %v: want a finite number > 0", s.LR)
	}
	return nil
}

func encodeWarm(b train.Batch, s WarmSpec) ([]byte, error) {
	if b.Loss != train.LossSFT {
		return nil, fmt.Errorf("warm_step: loss %q, want %q", b.Loss, train.LossSFT)
	}
	return encodeBatchMeta(b, map[string]string{"warm_index": strconv.Itoa(s.Index), "warm_steps": strconv.Itoa(s.Steps),
		"warmup_steps": strconv.Itoa(s.WarmupSteps), "lr": strconv.FormatFloat(s.LR, 'g', -1, 64)})
}

// decodeWarm reads a warm_step payload; errors name the field.
func decodeWarm(p []byte) (train.Batch, WarmSpec, error) {
	b, _, meta, err := decodeBatchMeta(p)
	if err != nil {
		return train.Batch{}, WarmSpec{}, err
	}
	if b.Loss != train.LossSFT {
		return train.Batch{}, WarmSpec{}, fmt.Errorf("loss %q: warm_step takes %q", b.Loss, train.LossSFT)
	}
	var s WarmSpec
	for _, f := range []struct {
		key string
		to  *int
	}{{"warm_index", &s.Index}, {"warm_steps", &s.Steps}, {"warmup_steps", &s.WarmupSteps}} {
		v, err := strconv.Atoi(meta[f.key])
		if err != nil || v < 0 {
			return train.Batch{}, WarmSpec{}, fmt.Errorf("__metadata__ %s %q: want a non-negative integer", f.key, meta[f.key])
		}
		*f.to = v
	}
	if s.LR, err = strconv.ParseFloat(meta["lr"], 64); err != nil {
		return train.Batch{}, WarmSpec{}, fmt.Errorf("__metadata__ lr %q: want a number", meta["lr"])
	}
	if err := s.validate(); err != nil {
		return train.Batch{}, WarmSpec{}, fmt.Errorf("__metadata__ %w", err)
	}
	return b, s, nil
}

type wireWarm struct {
	WarmStep int    `json:"warm_step"`
	Loss     jfloat `json:"loss"`
	GradNorm jfloat `json:"grad_norm"`
	LR       jfloat `json:"lr"`
	Tokens   int    `json:"tokens"`
}

// WarmStep sends warm-start step s. It is resent after an infra failure
// (the index fences it); a refusal by the fence is ErrWarmConflict.
func (c *Client) WarmStep(ctx context.Context, s WarmSpec, b train.Batch) (WarmStats, error) {
	if err := s.validate(); err != nil {
		return WarmStats{}, &Error{Class: failure.Data, Server: c.url, Err: fmt.Errorf("warm_step: %w", err)}
	}
	payload, err := encodeWarm(b, s)
	if err != nil {
		return WarmStats{}, &Error{Class: failure.Data, Server: c.url, Err: fmt.Errorf("encode warm batch: %w", err)}
	}
	var w wireWarm
	if err := c.retry(ctx, "warm_step", false, func() error {
		return c.do(ctx, c.opts.StepTimeout, http.MethodPost, "/v1/warm_step", "application/octet-stream", payload, &w)
	}); err != nil {
		return WarmStats{}, err
	}
	c.mu.Lock()
	c.known, c.warm = 0, w.WarmStep // a warm step is taken only at RL step 0
	c.mu.Unlock()
	return WarmStats{WarmStep: w.WarmStep, Loss: float64(w.Loss), GradNorm: float64(w.GradNorm), LR: float64(w.LR), Tokens: w.Tokens}, nil
}

// WarmState reports the trainer's warm-start steps taken and its RL step.
func (c *Client) WarmState(ctx context.Context) (warm int, step int64, err error) {
	var s wireState
	if err := c.retry(ctx, "state", false, func() error {
		return c.do(ctx, c.opts.Timeout, http.MethodGet, "/v1/state", "", nil, &s)
	}); err != nil {
		return 0, 0, err
	}
	return s.WarmStep, s.Step, nil
}

// warmStep serves POST /v1/warm_step for a Warmer.
func (h *handler) warmStep(w http.ResponseWriter, r *http.Request) {
	wt, ok := h.t.(Warmer)
	if !ok {
		writeErr(w, http.StatusNotImplemented, "not_implemented", "this trainer takes no warm-start steps (warm_step)")
		return
	}
	var spec WarmSpec
	b, ok := h.readBatch(w, r, "warm_step", func(p []byte) (b train.Batch, err error) {
		b, spec, err = decodeWarm(p)
		return b, err
	})
	if !ok {
		return
	}
	defer h.release()
	st, err := h.t.State(r.Context())
	if err != nil {
		h.fail(w, "state", err)
		return
	}
	conflict := func(code, msg string) {
		writeJSON(w, http.StatusConflict, map[string]any{"error": errBody{Code: code, Message: msg},
			"step": st.Step, "version": st.Version, "warm_step": wt.WarmDone()})
	}
	switch {
	case st.Step != 0:
		conflict("warm_after_rl", fmt.Sprintf("trainer is at RL step %d: a warm start runs only before the first train_step", st.Step))
		return
	case spec.Index != wt.WarmDone():
		conflict("warm_conflict", fmt.Sprintf("trainer has taken %d warm-start steps, the batch is step %d", wt.WarmDone(), spec.Index))
		return
	}
	ws, err := wt.WarmStep(r.Context(), spec, b)
	if err != nil {
		h.fail(w, "warm_step", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"step": st.Step, "version": st.Version, "warm_step": ws.WarmStep, "warm_steps": spec.Steps,
		"loss": jfloat(ws.Loss), "grad_norm": jfloat(ws.GradNorm), "lr": jfloat(ws.LR), "tokens": ws.Tokens})
}
