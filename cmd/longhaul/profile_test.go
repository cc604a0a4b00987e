package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainProfiles: --cpu-profile and --trace write a pprof profile
// (gzipped protobuf) and a runtime execution trace ("go 1.N trace" header)
// covering a short run, and a path that cannot be created is an error
// naming the flag before the run starts.
func TestTrainProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace")
	// The progress printer and the logger write from their own goroutines:
	// a plain strings.Builder raced whenever a slow run printed a progress
	// line while it logged.
	var out lines
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"train", "--config", filepath.Join("..", "..", "examples", "ledger-tiny.yaml"),
		"--run-dir", filepath.Join(dir, "run"), "--no-progress", "--cpu-profile", cpu, "--trace", tr, "run.max_steps=2"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	p, err := os.ReadFile(cpu)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) < 100 || !bytes.HasPrefix(p, []byte{0x1f, 0x8b}) {
		t.Fatalf("--cpu-profile wrote %d bytes starting %x, want a gzipped profile", len(p), p[:min(len(p), 4)])
	}
	b, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) {
		t.Fatalf("--trace wrote %d bytes starting %q, want an execution trace", len(b), b[:min(len(b), 16)])
	}

	root = newRootCmd()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"train", "--config", filepath.Join("..", "..", "examples", "ledger-tiny.yaml"),
		"--run-dir", filepath.Join(dir, "run2"), "--no-progress", "--trace", filepath.Join(dir, "missing", "run.trace")})
	err = root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Fatalf("an uncreatable --trace path: %v, want an error naming --trace", err)
	}
}
