package crashtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/server"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

const fenceSteps = 8

// TestRestartedServerIsFenced is issue 12's "version fencing": the only
// `longhaul serve` of a deterministic run is SIGKILLed the moment version
// 1 is published and started again as the README starts it (no
// --weights: it serves its initial weights, labelled version 0). The run
// reaches it through a proxy that drops the server's process name
// (server.InstanceHeader), as an engine that names none (vLLM, SGLang)
// answers: the client's instance check cannot see the restart, and version
// 0 is within its default window (one version behind), so only the
// controller's strict fence (Expect(v, v) in deterministic mode) refuses
// the restarted server's calls until it has been brought to version 1.
// (Without the proxy the instance check catches it first, and the test
// passed with the fence removed; TestHFServedRunKilled runs that path.)
// The run must end with the same weights and the same calls as
// the uninterrupted in-process run, and every logged call must carry the
// version the schedule names.
func TestRestartedServerIsFenced(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	work := t.TempDir()
	ref := filepath.Join(work, "ref")
	train(t, bin, cfg, ref, fmt.Sprint("run.max_steps=", fenceSteps))
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	port := proctest.FreePort(t)
	srv := startReadme(t, bin, work, port, "serve", "--config", cfg)
	tp := startTrain(t, bin, work, "--config", cfg, "--run-dir", "run", fmt.Sprint("run.max_steps=", fenceSteps),
		"generator.kind=openai", "generator.urls="+noInstance(t, port)+"/v1", "trainer.kind=embedded")
	if !waitFor(tp.exited, 60*time.Second, func() bool { return healthVersion(port) == 1 }) {
		t.Fatalf("version 1 was never published:\n%s", tail(tp.out.String(), 40))
	}
	srv.restart()
	if v := healthVersion(port); v != 0 && v != 1 {
		t.Fatalf("the restarted server reports version %d, want 0 (or 1 once caught up)", v)
	}
	if err := tp.wait(t, 90*time.Second); err != nil {
		t.Fatalf("train: %v\n%s", err, tail(tp.out.String(), 60))
	}
	dir := filepath.Join(work, "run")
	checkScheduledVersions(t, dir, 1) // run.max_lag defaults to 1
	got, err := Summarize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("the run with a server restarted without --weights differs from the uninterrupted one: %s\n%s", d, tail(tp.out.String(), 40))
	}
	if os.Getenv("LONGHAUL_TEST_VERBOSE") != "" {
		t.Log(tp.out.String())
	}
}

// noInstance is a reverse proxy to the `longhaul serve` on port that drops
// its process name (server.InstanceHeader) from every answer. While the
// server is down it answers 503, as a loading server does, so the client
// waits for it as for a restart.
func noInstance(t *testing.T, port int) string {
	t.Helper()
	target, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Del(server.InstanceHeader)
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	ts := httptest.NewServer(rp)
	t.Cleanup(ts.Close)
	return ts.URL
}

// checkScheduledVersions: in deterministic mode every call of a group
// trained at step k was answered by version k-1-lag (clamped at 0), the
// version the schedule names.
func checkScheduledVersions(t *testing.T, dir string, lag int64) {
	t.Helper()
	ctx := context.Background()
	rep, err := runlog.Inspect(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	stepOf := map[string]int64{}
	for _, tr := range rep.Trained {
		for _, g := range tr.GroupIDs {
			stepOf[g] = tr.Step
		}
	}
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bad := 0
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		c, ok := ev.(runlog.CallFinished)
		if !ok {
			return nil
		}
		k, ok := stepOf[c.Rollout.Group.String()]
		if !ok {
			return nil
		}
		if due := max(0, k-1-lag); c.Version != due {
			if bad++; bad <= 5 {
				t.Errorf("call %d of rollout %s (step %d) was answered by version %d, the schedule names %d", c.Call, c.Rollout, k, c.Version, due)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad > 5 {
		t.Errorf("... %d calls at a version the schedule does not name", bad)
	}
}
