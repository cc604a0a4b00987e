package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store/mirror"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// TestMachineLossTrainerAhead: the controller's machine is lost while the
// trainer (`longhaul serve-trainer`) and the generation server
// (`longhaul serve`), on machines of their own, have run ahead of what
// the bucket holds: the bucket ships only at checkpoints here, so at the
// loss it holds step 6's checkpoint while the trainer has applied later
// steps and the server serves their weights. The controller started on a
// fresh machine loads the bucket's checkpoint into the trainer, rewinds,
// publishes it to the server, and the deterministic run ends with the
// weights, trained prompts and calls of the uninterrupted in-process run.
func TestMachineLossTrainerAhead(t *testing.T) {
	bin, srv, c := needS3E2E(t)
	const steps = 12
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, tinyConfig(t), ref, fmt.Sprintf("run.max_steps=%d", steps))

	work := t.TempDir()
	tport, gport := proctest.FreePort(t), proctest.FreePort(t)
	startReadme(t, bin, work, tport, "serve-trainer", "--config", tinyConfig(t))
	startReadme(t, bin, work, gport, "serve", "--config", tinyConfig(t))
	url := "s3://" + c.Bucket() + "/ahead"
	// No sync clock and no snapshot in the run: the bucket moves at
	// checkpoints (steps 6 and 12) only: a loss at step 7 to 11 leaves the
	// trainer ahead.
	args := []string{fmt.Sprintf("run.max_steps=%d", steps), "store.lease_s=1", "store.sync_interval_s=3600",
		"rollout_checkpointing.snapshot_attempt_interval_s=3600", "checkpointing.save_period=6",
		"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", gport),
		"trainer.kind=remote", fmt.Sprintf("trainer.url=http://127.0.0.1:%d", tport)}

	cache := filepath.Join(work, "first") // under the servers' working directory: the paths they may read and write
	first := startNode(t, bin, srv.Env(), url, cache, "", args...)
	waitUntil(t, "step 7 in the first machine's cache", 2*time.Minute, func() bool {
		select {
		case <-first.done:
			t.Fatalf("the first controller ended before step 7: %v\n%s", first.err, first.out.String())
		default:
		}
		return lines(cache) >= 7
	})
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	if !first.killedBySignal() {
		t.Fatalf("the first controller ended before the kill: %v\n%s", first.err, first.out.String())
	}

	// What the trainer holds against what the bucket holds, at the loss.
	trainerStep := remoteTrainerStep(t, tport)
	pulled := filepath.Join(t.TempDir(), "at-loss")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := mirror.Pull(ctx, c, "ahead", pulled); err != nil {
		t.Fatal(err)
	}
	rep, err := runlog.Inspect(ctx, pulled)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("at the loss: the trainer at step %d, the bucket's log at step %d", trainerStep, rep.Step)
	if trainerStep <= rep.Step {
		t.Fatalf("the trainer (step %d) is not ahead of the bucket (step %d): the case this test is for did not happen", trainerStep, rep.Step)
	}

	second := startNode(t, bin, srv.Env(), url, filepath.Join(work, "second"), "", args...)
	select {
	case <-second.done:
	case <-time.After(4 * time.Minute):
		second.cmd.Process.Signal(syscall.SIGKILL)
		<-second.done
		t.Fatalf("the controller on the new machine did not finish in 4 minutes:\n%s", tail(second.out.String(), 40))
	}
	if second.err != nil {
		t.Fatalf("the controller on the new machine: %v\n%s", second.err, second.out.String())
	}
	final := filepath.Join(t.TempDir(), "final")
	if _, err := mirror.Pull(ctx, c, "ahead", final); err != nil {
		t.Fatal(err)
	}
	if d := differs(t, ref, final); d != "" {
		t.Fatalf("resumed with the trainer and server ahead of the bucket, the run differs from the uninterrupted one: %s\n%s", d, tail(second.out.String(), 40))
	}
}

// differs summarizes two run directories and returns how they differ
// (Compare), "" when equal.
func differs(t *testing.T, a, b string) string {
	t.Helper()
	sa, err := Summarize(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Summarize(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return Compare(sa, sb)
}

// remoteTrainerStep asks a `longhaul serve-trainer` for its step.
func remoteTrainerStep(t *testing.T, port int) int64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/state", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Step int64 `json:"step"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("trainer state: HTTP %d, %v", resp.StatusCode, err)
	}
	return st.Step
}
