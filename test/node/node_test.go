// Package node checks `longhaul serve` against the official OpenAI Node SDK,
// a client no one here wrote. It runs only where node and this directory's
// node_modules exist (CI runs `npm ci` here first).
package node

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestOpenAINodeSDK(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed")
	}
	if _, err := os.Stat("node_modules/openai"); err != nil {
		t.Skip("node_modules missing: run npm ci in test/node")
	}
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "run.sh")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("run.sh: %v", err)
	}
}
