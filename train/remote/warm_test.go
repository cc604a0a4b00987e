package remote

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/train"
)

// warmFake is a fakeTrainer that takes warm steps.
type warmFake struct {
	fakeTrainer
	done  int
	specs []WarmSpec
}

func (w *warmFake) WarmDone() int { return w.done }

func (w *warmFake) WarmStep(_ context.Context, s WarmSpec, b train.Batch) (WarmStats, error) {
	w.specs = append(w.specs, s)
	w.batches = append(w.batches, b)
	w.done = s.Index + 1
	return WarmStats{WarmStep: w.done, Loss: 2.5, GradNorm: 0.5, LR: s.LR, Tokens: 3}, nil
}

func sftBatch() train.Batch {
	return train.Batch{Loss: train.LossSFT, Rows: []train.Row{{Tokens: []int32{1, 2, 3}, Mask: []uint8{0, 1, 1},
		Advantages: []float32{0, 1, 1}, OldLogprobs: []float32{0, -1, -1}}}}
}

// TestWarmStepFenced: warm steps go through in order with their spec and
// batch; a resent step (applied before its answer was lost) is refused
// with ErrWarmConflict and WarmState says where the trainer is; after an
// RL step a warm step is refused; a trainer without warm steps answers
// 501.
func TestWarmStepFenced(t *testing.T) {
	f := &warmFake{}
	srv := httptest.NewServer(Handler(f))
	defer srv.Close()
	c := New(srv.URL, Options{})
	ctx := t.Context()
	spec := WarmSpec{Steps: 3, WarmupSteps: 2, LR: 5e-3}
	for i := range 2 {
		spec.Index = i
		st, err := c.WarmStep(ctx, spec, sftBatch())
		if err != nil {
			t.Fatal(err)
		}
		if st.WarmStep != i+1 || st.LR != 5e-3 || st.Loss != 2.5 || st.Tokens != 3 {
			t.Fatalf("step %d: %+v", i, st)
		}
	}
	if len(f.specs) != 2 || f.specs[1] != (WarmSpec{Index: 1, Steps: 3, WarmupSteps: 2, LR: 5e-3}) || !bytes.Equal(u8(f.batches[1].Rows[0].Mask), []byte{0, 1, 1}) {
		t.Fatalf("trainer got %+v / %+v", f.specs, f.batches)
	}
	spec.Index = 1 // resent
	if _, err := c.WarmStep(ctx, spec, sftBatch()); !errors.Is(err, ErrWarmConflict) || failure.ClassOf(err) != failure.Data {
		t.Fatalf("resent warm step: %v", err)
	}
	if w, s, err := c.WarmState(ctx); err != nil || w != 2 || s != 0 {
		t.Fatalf("WarmState = %d, %d, %v", w, s, err)
	}
	if len(f.specs) != 2 {
		t.Fatalf("the resent step was applied: %d steps", len(f.specs))
	}
	f.st.Step = 1
	spec.Index = 2
	if _, err := c.WarmStep(ctx, spec, sftBatch()); !errors.Is(err, ErrWarmAfterRL) {
		t.Fatalf("warm step after RL: %v", err)
	}
	pg := sftBatch()
	pg.Loss = train.LossPG
	if _, err := c.WarmStep(ctx, spec, pg); err == nil || !strings.Contains(err.Error(), "sft") {
		t.Fatalf("pg batch as a warm step: %v", err)
	}

	plain := httptest.NewServer(Handler(&fakeTrainer{}))
	defer plain.Close()
	if _, err := New(plain.URL, Options{}).WarmStep(ctx, WarmSpec{Steps: 1, LR: 1}, sftBatch()); err == nil || !strings.Contains(err.Error(), "HTTP 501") {
		t.Fatalf("trainer without warm steps: %v", err)
	}
}

func u8(b []uint8) []byte { return b }

// TestWarmPayloadErrorsNameTheField: a bad warm_step payload answers 400
// naming the metadata key.
func TestWarmPayloadErrorsNameTheField(t *testing.T) {
	srv := httptest.NewServer(Handler(&warmFake{}))
	defer srv.Close()
	for key, val := range map[string]string{"warm_index": "-1", "warm_steps": "x", "lr": "0", "warmup_steps": "", "loss": "pg"} {
		meta := map[string]string{"warm_index": "0", "warm_steps": "2", "lr": "0.01", "warmup_steps": "1"}
		meta[key] = val
		b := sftBatch()
		if key == "loss" {
			b.Loss = val
		}
		p, err := encodeBatchMeta(b, meta)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(srv.URL+"/v1/warm_step", "application/octet-stream", bytes.NewReader(p))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(buf.String(), key) {
			t.Errorf("%s=%q: HTTP %d %s", key, val, resp.StatusCode, buf.String())
		}
	}
}

// TestRestartAfterWarmStartFenced: a trainer restarted after the warm start
// is at RL step 0 like the warm-started one, with the weights from before
// the warm start. Its warm count tells them apart: the export and the
// first RL step are refused as a lost state, until a checkpoint is loaded.
func TestRestartAfterWarmStartFenced(t *testing.T) {
	f := &warmFake{}
	srv := httptest.NewServer(Handler(f))
	defer srv.Close()
	c := New(srv.URL, Options{})
	ctx := t.Context()
	w := filepath.Join(t.TempDir(), "w0.safetensors")
	warmThenExport(t, c, 3, w)
	f.done = 0 // the trainer restarted: step 0, no warm start
	if err := c.ExportWeights(ctx, w); !errors.Is(err, train.ErrStateLost) {
		t.Fatalf("export from a trainer restarted after the warm start: %v", err)
	}
	if _, err := c.TrainStep(ctx, testBatch()); !errors.Is(err, train.ErrStateLost) {
		t.Fatalf("first RL step on a trainer restarted after the warm start: %v", err)
	}
	if n := len(f.batches); n != 3 {
		t.Fatalf("the trainer got %d batches, want the 3 warm steps only", n)
	}
	if err := c.LoadCheckpoint(ctx, t.TempDir()); err != nil { // the fake loads any directory
		t.Fatal(err)
	}
	if _, err := c.TrainStep(ctx, testBatch()); err != nil {
		t.Fatalf("RL step after the checkpoint was loaded: %v", err)
	}
}

// TestExportFencedAtWarmStep: during a warm start the export carries the
// warm step the client knows; a trainer that restarted after the client's
// state check (back at RL step 0, but with none of the warm start's steps)
// refuses it instead of exporting untrained weights as the warm start's.
func TestExportFencedAtWarmStep(t *testing.T) {
	f := &warmFake{}
	h := Handler(f)
	var armed bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/v1/state" && armed {
			armed = false
			f.done = 0 // restarted: the warm steps are gone
		}
	}))
	defer srv.Close()
	c := New(srv.URL, Options{})
	ctx := t.Context()
	w := filepath.Join(t.TempDir(), "model.safetensors")
	warmThenExport(t, c, 2, w)
	armed = true
	if err := c.ExportWeights(ctx, w); !errors.Is(err, ErrStepConflict) || !errors.Is(err, train.ErrStateLost) {
		t.Fatalf("export from a trainer that lost its warm steps after the check: %v", err)
	}
	if n := len(f.calls); n != 1 {
		t.Fatalf("the trainer exported %d times, want once: %v", n, f.calls)
	}
}

// warmThenExport takes n warm steps of a 3-step warm start through c and
// exports to path, which must succeed: the trainer is where c knows.
func warmThenExport(t *testing.T, c *Client, n int, path string) {
	t.Helper()
	spec := WarmSpec{Steps: 3, LR: 1e-3}
	for i := range n {
		spec.Index = i
		if _, err := c.WarmStep(t.Context(), spec, sftBatch()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ExportWeights(t.Context(), path); err != nil {
		t.Fatalf("export after %d warm steps: %v", n, err)
	}
}
