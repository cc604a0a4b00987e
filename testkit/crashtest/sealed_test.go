package crashtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
)

// TestDamageInSealedChunkReported: a byte flipped in a chunk that an
// earlier resume verified and sealed, and that the newest snapshot covers,
// is read by no later resume's replay. The resume must still find it
// (naming file and offset), go on from the snapshot to the uninterrupted
// run's weights, log it, and `longhaul inspect` must show it instead of
// refusing the run. Real processes of the longhaul binary.
func TestDamageInSealedChunkReported(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	ctx := context.Background()
	ref := filepath.Join(t.TempDir(), "ref")
	train(t, bin, cfg, ref, "run.max_steps=6")
	want, err := runlog.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	train(t, bin, cfg, dir, "run.max_steps=4")
	first := filepath.Join(dir, "runlog", "00000000000000000000.seg")
	fi, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	// This resume verifies the first chunk, moves the watermark past it,
	// seals it and snapshots past it: no later replay reads it.
	train(t, bin, cfg, dir, "run.max_steps=5", "--allow-config-change", "run.max_steps")
	b, err := os.ReadFile(first)
	if err != nil || int64(len(b)) != fi.Size() {
		t.Fatalf("first chunk changed size: %v", err)
	}
	b[len(b)/2] ^= 0x20
	if err := os.WriteFile(first, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := train(t, bin, cfg, dir, "run.max_steps=6", "--allow-config-change", "run.max_steps")
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "damage") && strings.Contains(l, filepath.Base(first)) && strings.Contains(l, "offset") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("resume over a damaged sealed chunk did not report it:\n%s", out)
	}
	t.Logf("reported: %s", line)
	got, err := runlog.Inspect(ctx, dir)
	if err != nil {
		t.Fatalf("inspect refuses the run: %v", err)
	}
	if got.WeightsSHA256 != want.WeightsSHA256 || got.Step != 6 {
		t.Fatalf("went on to step %d, weights %s; the uninterrupted run has %s", got.Step, got.WeightsSHA256, want.WeightsSHA256)
	}
	js, err := exec.Command(bin, "inspect", "--json", dir).Output()
	var rep struct {
		Damage []struct {
			File   string `json:"file"`
			Logged bool   `json:"logged"`
		} `json:"damage"`
	}
	if err != nil || json.Unmarshal(js, &rep) != nil || len(rep.Damage) != 1 || !rep.Damage[0].Logged || rep.Damage[0].File != filepath.Join("runlog", filepath.Base(first)) {
		t.Fatalf("longhaul inspect --json: %v, damage %+v, want the one logged\n%s", err, rep.Damage, js)
	}
	text, err := exec.Command(bin, "inspect", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(text), "DAMAGE") || !strings.Contains(string(text), filepath.Base(first)) {
		t.Fatalf("longhaul inspect: %v\n%s", err, text)
	}
}
