package crashtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

const finalExportSteps = 4

// TestTrainerKilledBeforeFinalExport: the run's `longhaul serve-trainer`
// is SIGKILLed and started again when the final weights' export reaches
// it, after the last step was trained (CI's chaos test once killed it
// there and the run ended in an error). A first three-process run through
// the same proxy counts the trainer's exports (one per published version,
// then the final one); the second kills the trainer at the last of them.
// The trainer refuses the export (expect_step: it restarted after the
// client checked its step), the run recovers (loads the last checkpoint
// into the new trainer), exports again and ends equal to the
// uninterrupted in-process run, weights file included.
func TestTrainerKilledBeforeFinalExport(t *testing.T) {
	bin, work, cfg, want := inProcessRef(t, finalExportSteps)
	exports, _ := killRun(t, bin, work, cfg, filepath.Join(work, "count"), "/v1/export_weights", 0)
	if exports < finalExportSteps+1 {
		t.Fatalf("%d exports in a run of %d steps: want one per version and the final one", exports, finalExportSteps)
	}
	dir := filepath.Join(work, "run")
	n, logs := killRun(t, bin, work, cfg, dir, "/v1/export_weights", exports)
	t.Logf("trainer killed at export %d of %d; %d recoveries", exports, n, strings.Count(logs, "the trainer lost its state"))
	// After the recovery the restored weights are published (an export)
	// and the final export is made again.
	if n <= exports || strings.Count(logs, "the trainer lost its state") != 1 {
		t.Fatalf("%d exports (want more than the %d of an uninterrupted run: the final one again) and one recovery:\n%s",
			n, exports, tail(logs, 40))
	}
	got, err := Summarize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("the run whose trainer restarted before the final export differs from the uninterrupted one: %s\n%s", d, tail(logs, 40))
	}
}

// TestTrainerKilledAtCheckpointSave: the same at the second checkpoint
// save, step 3's (the first is step 0's, after the warm start, which a
// restarted trainer, warm-started alike, would save the same; save_period
// 3, 4 steps). The restarted trainer must refuse to save its fresh state
// as step 3's checkpoint (expect_step); the run recovers from what is
// durable and ends equal to the in-process run.
func TestTrainerKilledAtCheckpointSave(t *testing.T) {
	bin, work, cfg, want := inProcessRef(t, finalExportSteps)
	saves, _ := killRun(t, bin, work, cfg, filepath.Join(work, "count"), "/v1/save_checkpoint", 0)
	if saves != 3 {
		t.Fatalf("%d checkpoint saves in a run of %d steps with save_period 3: want 3 (steps 0, 3 and 4)", saves, finalExportSteps)
	}
	dir := filepath.Join(work, "run")
	_, logs := killRun(t, bin, work, cfg, dir, "/v1/save_checkpoint", 2)
	if n := strings.Count(logs, "the trainer lost its state"); n != 1 {
		t.Fatalf("%d recoveries, want 1:\n%s", n, tail(logs, 40))
	}
	got, err := Summarize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("the run whose trainer restarted at a checkpoint save differs from the uninterrupted one: %s\n%s", d, tail(logs, 40))
	}
}

// killRun runs the README's three processes to the end, the trainer
// reached through a proxy that counts the POSTs to route and, at the
// killAt-th (0: never), SIGKILLs the trainer and starts it again before
// passing the request on. It returns the count and train's output.
func killRun(t *testing.T, bin, work, cfg, dir, route string, killAt int) (int, string) {
	t.Helper()
	tport, gport := proctest.FreePort(t), proctest.FreePort(t)
	trainer := startReadme(t, bin, work, tport, "serve-trainer", "--config", cfg)
	srv := startReadme(t, bin, work, gport, "serve", "--config", cfg)
	defer srv.kill()
	defer trainer.kill()
	target, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", tport))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	exports := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == route {
			mu.Lock()
			exports++
			hit := exports == killAt
			mu.Unlock()
			if hit {
				trainer.restart() // killed, started again and healthy
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer ts.Close()
	tp := startTrain(t, bin, work, "--config", cfg, "--run-dir", dir,
		"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", gport),
		"trainer.kind=remote", "trainer.url="+ts.URL)
	if err := tp.wait(t, 120*time.Second); err != nil {
		t.Fatalf("train: %v\n%s", err, tail(tp.out.String(), 60))
	}
	mu.Lock()
	defer mu.Unlock()
	return exports, tp.out.String()
}
