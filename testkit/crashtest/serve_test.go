package crashtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// serveProc starts a long-running longhaul subcommand and waits for /health.
func serveProc(t *testing.T, bin string, port int, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--port", fmt.Sprint(port), "--allow-path", os.TempDir())...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("%v exited:\n%s", args, out.String())
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v did not become healthy:\n%s", args, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestThreeProcessesEqualInProcess: the controller driving `longhaul serve`
// (generation, over the OpenAI-compatible API) and `longhaul serve-trainer`
// (training, over the trainer protocol), with weights flowing trainer →
// disk → reload → server, ends a deterministic run with the same weights
// and the same logged tokens as the all-in-one-process run.
func TestThreeProcessesEqualInProcess(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, cfg, ref, "run.max_steps=6")
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}

	tport, gport := proctest.FreePort(t), proctest.FreePort(t)
	serveProc(t, bin, tport, "serve-trainer", "--config", cfg, "run.max_steps=6")
	serveProc(t, bin, gport, "serve", "--config", cfg)
	dir := filepath.Join(t.TempDir(), "served")
	train(t, bin, cfg, dir, "run.max_steps=6",
		"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", gport),
		"trainer.kind=remote", fmt.Sprintf("trainer.url=http://127.0.0.1:%d", tport))
	got, err := Summarize(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("served run differs from the in-process run: %s", d)
	}
}
