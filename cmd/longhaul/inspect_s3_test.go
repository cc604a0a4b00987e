package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/store/mirror"
	"github.com/longhaul-rl/longhaul/testkit/s3test"
)

func inspectOut(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(append([]string{"inspect"}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("inspect %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// TestInspectBucketRun: `longhaul inspect s3://BUCKET/PREFIX` on a run kept
// in a real S3 server (SeaweedFS on loopback) prints what it prints for a
// local copy of the run pulled from the bucket, naming the run by its URL.
func TestInspectBucketRun(t *testing.T) {
	srv := s3test.Start(t)
	c := srv.MakeBucket(t, "inspect")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "ledger-tiny.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ApplyOverrides([]string{"run.max_steps=2", "store.cache_dir=" + t.TempDir(),
		"store.sync_interval_s=0.05", "store.lease_s=1"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := runner.Train(context.Background(), cfg, runner.Options{RunDir: "s3://inspect/run"}); err != nil {
		t.Fatal(err)
	}
	got := inspectOut(t, "s3://inspect/run")
	local := filepath.Join(t.TempDir(), "pulled")
	if _, err := mirror.Pull(context.Background(), c, "run", local); err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(inspectOut(t, local), local, "s3://inspect/run", 1)
	if got != want {
		t.Fatalf("inspect of the bucket run:\n%s\nof a local copy of it:\n%s", got, want)
	}
	if !strings.Contains(got, "step             2 ") {
		t.Fatalf("inspect of a 2-step run does not show its step:\n%s", got)
	}
}
