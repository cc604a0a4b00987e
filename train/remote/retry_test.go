package remote

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/train"
)

// flaky answers 503 while down is set, else serves h.
func flaky(h http.Handler, down *atomic.Bool) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// TestTrainerOutageRetried: a trainer away for a while (503, as a
// restarting one answers) is waited for and the step goes through once.
func TestTrainerOutageRetried(t *testing.T) {
	f := &fakeTrainer{}
	var down atomic.Bool
	ts := flaky(Handler(f), &down)
	defer ts.Close()
	// The outage ends when the test has seen Describe name it; MaxOutage
	// only bounds a broken run, so a busy machine cannot outlast it.
	c := New(ts.URL, Options{MinBackoff: 10 * time.Millisecond, MaxOutage: 2 * time.Minute})
	if _, err := c.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	time.AfterFunc(150*time.Millisecond, func() { down.Store(false) })
	st, err := c.TrainStep(t.Context(), train.Batch{Loss: train.LossPG, Rows: testBatch().Rows[1:2]})
	if err != nil {
		t.Fatalf("step across a 150 ms outage: %v", err)
	}
	if st.Step != 1 || len(f.batches) != 1 {
		t.Fatalf("step %d, %d batches applied; want 1 and 1", st.Step, len(f.batches))
	}
}

// TestTrainerRestartedIsTyped: a trainer that comes back at another step is
// not retried into; the caller gets a *RestartedError naming both steps.
func TestTrainerRestartedIsTyped(t *testing.T) {
	f := &fakeTrainer{st: train.State{Step: 5, Version: 5}}
	var down atomic.Bool
	ts := flaky(Handler(f), &down)
	defer ts.Close()
	c := New(ts.URL, Options{MinBackoff: 10 * time.Millisecond, MaxOutage: 5 * time.Second})
	if _, err := c.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	time.AfterFunc(100*time.Millisecond, func() {
		f.mu.Lock()
		f.st = train.State{} // restarted from its seed
		f.mu.Unlock()
		down.Store(false)
	})
	_, err := c.TrainStep(t.Context(), train.Batch{Loss: train.LossPG, Rows: testBatch().Rows[1:2]})
	var re *RestartedError
	if !errors.As(err, &re) || !errors.Is(err, ErrTrainerRestarted) || re.Want != 5 || re.Got != 0 {
		t.Fatalf("step to a restarted trainer: %v", err)
	}
	if len(f.batches) != 0 {
		t.Fatalf("%d batches applied to the restarted trainer", len(f.batches))
	}
	// A checkpoint save is fenced the same way.
	down.Store(true)
	time.AfterFunc(50*time.Millisecond, func() { down.Store(false) })
	c2 := New(ts.URL, Options{MinBackoff: 10 * time.Millisecond})
	c2.setKnown(5)
	if err := c2.SaveCheckpoint(t.Context(), "/ck"); !errors.As(err, &re) {
		t.Fatalf("save to a restarted trainer: %v", err)
	}
}

// TestExportToRestartedTrainerRefused: a trainer that restarted and is
// back before the export (no failed attempt to trigger the fence) is
// caught by the step check: its initial weights are never exported as
// the run's.
func TestExportToRestartedTrainerRefused(t *testing.T) {
	f := &fakeTrainer{st: train.State{Step: 5, Version: 5}}
	ts := httptest.NewServer(Handler(f))
	defer ts.Close()
	c := New(ts.URL, Options{MinBackoff: 10 * time.Millisecond})
	if _, err := c.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := filepath.Join(t.TempDir(), "model.safetensors")
	if err := c.ExportWeights(t.Context(), w); err != nil {
		t.Fatalf("export at the known step: %v", err)
	}
	f.mu.Lock()
	f.st = train.State{} // restarted from its seed, already back
	f.mu.Unlock()
	err := c.ExportWeights(t.Context(), w)
	var re *RestartedError
	if !errors.As(err, &re) || !errors.Is(err, train.ErrStateLost) || re.Got != 0 {
		t.Fatalf("export from a restarted trainer: %v", err)
	}
}

// TestDescribeNamesAwayTrainer: while a call waits for an unreachable
// trainer, Describe (the stall watchdog's line) names it; once it
// answers again, it says so.
func TestDescribeNamesAwayTrainer(t *testing.T) {
	f := &fakeTrainer{}
	var down atomic.Bool
	ts := flaky(Handler(f), &down)
	defer ts.Close()
	c := New(ts.URL, Options{MinBackoff: 10 * time.Millisecond, MaxOutage: 5 * time.Second})
	if _, err := c.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := c.TrainStep(t.Context(), train.Batch{Loss: train.LossPG, Rows: testBatch().Rows[1:2]})
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(c.Describe(), "waiting on trainer "+ts.URL+": unreachable") {
		if time.Now().After(deadline) {
			t.Fatalf("Describe() = %q while the trainer is away", c.Describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
	down.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(); d != "trainer "+ts.URL+" reachable" {
		t.Fatalf("Describe() = %q after the trainer came back", d)
	}
}

// TestSaveAndExportFencedAtTrainer: a trainer that restarts between the
// client's step check and the save or export (the check passes, the call
// reaches the new process) refuses the call with step_conflict instead of
// saving or exporting its fresh state as the run's; the client reports
// train.ErrStateLost. A load is not fenced: it sets the state.
func TestSaveAndExportFencedAtTrainer(t *testing.T) {
	f := &fakeTrainer{st: train.State{Step: 5, Version: 5}}
	h := Handler(f)
	// The client's state check passes against the old trainer, which
	// "restarts" right after answering it (once armed).
	var armed atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/v1/state" && armed.CompareAndSwap(true, false) {
			f.mu.Lock()
			f.st = train.State{}
			f.mu.Unlock()
		}
	}))
	defer ts.Close()
	c := New(ts.URL, Options{MinBackoff: 10 * time.Millisecond})
	tmp := t.TempDir()
	w, ck := filepath.Join(tmp, "model.safetensors"), filepath.Join(tmp, "ckpt")
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"export", func() error { return c.ExportWeights(t.Context(), w) }},
		{"save", func() error { return c.SaveCheckpoint(t.Context(), ck) }},
	} {
		f.mu.Lock()
		f.st = train.State{Step: 5, Version: 5}
		f.mu.Unlock()
		if _, err := c.State(t.Context()); err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		err := call.do()
		if !errors.Is(err, ErrStepConflict) || !errors.Is(err, train.ErrStateLost) {
			t.Fatalf("%s on a trainer restarted after the check: %v", call.name, err)
		}
	}
	os.Mkdir(ck, 0o755) // a checkpoint loads from a directory that exists
	if err := c.LoadCheckpoint(t.Context(), ck); err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, body := range []string{`{"path":"/w/m","expect_step":-1}`, `{"path":"/w/m","expect_step":"5"}`, `{"path":"/w/m","expect_warm_step":1.5}`} {
		resp, err := http.Post(ts.URL+"/v1/export_weights", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("export %s: status %d, want 400", body, resp.StatusCode)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 1 || f.calls[0] != "load "+ck {
		t.Fatalf("the trainer ran %v; want only the load", f.calls)
	}
}
