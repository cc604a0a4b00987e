package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ltrain "github.com/longhaul-rl/longhaul/train"
	"github.com/longhaul-rl/longhaul/train/remote"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// capped starts the longhaul binary as a server under a 4 GiB address-space
// cap (prlimit --as) and waits for its /health.
func capped(t *testing.T, bin string, port int, args ...string) {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit not installed")
	}
	full := append([]string{"--as=4294967296", bin}, append(args, "--port", fmt.Sprint(port))...)
	cmd := exec.Command(prlimit, full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("%v exited:\n%s", args, out.String())
		default:
		}
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port)); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v not healthy:\n%s", args, out.String())
		}
	}
}

type call struct {
	name, path, body string
	key              string
	want             int
	mention          string // the field the answer must name
}

func do(t *testing.T, port int, c call) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", port, c.path), strings.NewReader(c.body))
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v (after %v)", c.name, err, time.Since(t0))
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != c.want || !strings.Contains(string(b), c.mention) {
		t.Fatalf("%s: HTTP %d %s; want %d naming %q", c.name, resp.StatusCode, b, c.want, c.mention)
	}
	t.Logf("%s: %d in %v", c.name, resp.StatusCode, time.Since(t0).Round(time.Millisecond))
}

// TestServersRefuse: `longhaul serve` and `longhaul serve-trainer`, real
// processes under a memory cap, refuse hostile paths and bad numbers with
// 4xx naming the field, never hang, never answer 500, and keep serving.
func TestServersRefuse(t *testing.T) {
	bin := binary(t)
	cfg := tinyConfig(t)
	allowed := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(allowed, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/dev/zero", filepath.Join(allowed, "zero"))
	os.MkdirAll(filepath.Join(allowed, "full"), 0o755)
	os.WriteFile(filepath.Join(allowed, "full", "keep.txt"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(allowed, "notes.txt"), []byte("mine"), 0o644)
	gport, tport := proctest.FreePort(t), proctest.FreePort(t)
	capped(t, bin, gport, "serve", "--config", cfg, "--api-key", "k", "--allow-path", allowed)
	capped(t, bin, tport, "serve-trainer", "--config", cfg, "--api-key", "k", "--allow-path", allowed)

	reload := func(p string) string { return fmt.Sprintf(`{"model_path":%q}`, p) }
	for _, c := range []call{
		{"reload /dev/zero", "/update_weights_from_disk", reload("/dev/zero"), "k", 403, "model_path"},
		{"reload a symlink to /dev/zero", "/update_weights_from_disk", reload(filepath.Join(allowed, "zero")), "k", 403, "model_path"},
		{"reload a FIFO", "/update_weights_from_disk", reload(filepath.Join(allowed, "fifo")), "k", 400, "not a regular file"},
		{"reload without the key", "/update_weights_from_disk", reload(filepath.Join(allowed, "x")), "", 401, "API key"},
		{"max_tokens 2^63-1", "/v1/completions", `{"model":"longhaul","prompt":[1,2],"max_tokens":9223372036854775807}`, "k", 400, "max_tokens"},
		{"token id out of range", "/v1/completions", `{"model":"longhaul","prompt":[99999999],"max_tokens":2}`, "k", 400, "prompt"},
		{"generation still works", "/v1/completions", `{"model":"longhaul","prompt":[1,2],"max_tokens":2}`, "k", 200, "choices"},
	} {
		do(t, gport, c)
	}
	for _, c := range []call{
		{"export over a foreign file", "/v1/export_weights", `{"path":"/etc/passwd"}`, "k", 422, "path"},
		{"export to a non-weights file", "/v1/export_weights", fmt.Sprintf(`{"path":%q}`, filepath.Join(allowed, "notes.txt")), "k", 422, "safetensors"},
		{"checkpoint into a non-empty dir", "/v1/save_checkpoint", fmt.Sprintf(`{"dir":%q}`, filepath.Join(allowed, "full")), "k", 422, "not empty"},
		{"checkpoint outside", "/v1/save_checkpoint", `{"dir":"/var/tmp/x"}`, "k", 422, "allowed"},
		{"checkpoint without the key", "/v1/save_checkpoint", fmt.Sprintf(`{"dir":%q}`, filepath.Join(allowed, "new")), "", 401, ""},
		{"export into a missing directory", "/v1/export_weights", fmt.Sprintf(`{"path":%q}`, filepath.Join(allowed, "gone", "w.safetensors")), "k", 422, "path"},
		{"load a missing checkpoint", "/v1/load_checkpoint", fmt.Sprintf(`{"dir":%q}`, filepath.Join(allowed, "gone")), "k", 422, "dir"},
		{"export allowed", "/v1/export_weights", fmt.Sprintf(`{"path":%q}`, filepath.Join(allowed, "w.safetensors")), "k", 200, "ok"},
	} {
		do(t, tport, c)
	}
	if b, err := os.ReadFile(filepath.Join(allowed, "notes.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("a refused export touched the file: %q %v", b, err)
	}

	// Bad numbers in train_step, through the real client's encoding.
	c := remote.New(fmt.Sprintf("http://127.0.0.1:%d", tport), remote.Options{APIKey: "k"})
	row := func() ltrain.Row {
		return ltrain.Row{Tokens: []int32{1, 2, 3}, Mask: []uint8{0, 1, 1}, Advantages: []float32{0, 1, 1}, OldLogprobs: []float32{0, -1, -1}}
	}
	long := row()
	long.Tokens, long.Mask = make([]int32, 5000), make([]uint8, 5000)
	long.Advantages, long.OldLogprobs = make([]float32, 5000), make([]float32, 5000)
	long.Mask[1] = 1 // trainable, so only its length is wrong
	for _, tc := range []struct {
		name    string
		edit    func(*ltrain.Row)
		status  int
		mention string
	}{
		{"NaN advantage", func(r *ltrain.Row) { r.Advantages[1] = float32(math.NaN()) }, 400, "advantages"},
		{"infinite advantage", func(r *ltrain.Row) { r.Advantages[2] = float32(math.Inf(1)) }, 400, "advantages"},
		{"mask 2", func(r *ltrain.Row) { r.Mask[1] = 2 }, 400, "mask"},
		{"token id out of range", func(r *ltrain.Row) { r.Tokens[0] = 1 << 30 }, 422, "tokens"},
		{"negative token id", func(r *ltrain.Row) { r.Tokens[0] = -5 }, 422, "tokens"},
		{"row longer than the context", func(r *ltrain.Row) { *r = long }, 422, "context"},
		{"NaN old logprob", func(r *ltrain.Row) { r.OldLogprobs[1] = float32(math.NaN()) }, 422, "old_logprobs"},
	} {
		r := row()
		tc.edit(&r)
		_, err := c.TrainStep(context.Background(), ltrain.Batch{Loss: ltrain.LossPG, Rows: []ltrain.Row{r}})
		var e *remote.Error
		if !errors.As(err, &e) || e.Status != tc.status || !strings.Contains(err.Error(), tc.mention) {
			t.Fatalf("train_step with %s: %v; want HTTP %d naming %s", tc.name, err, tc.status, tc.mention)
		}
		t.Logf("train_step with %s: %d", tc.name, e.Status)
	}
	// Bad batches as a whole: no rows, nothing trainable, a microbatch
	// plan that does not hold every row once.
	for _, tc := range []struct {
		name    string
		b       ltrain.Batch
		mention string
	}{
		{"zero rows", ltrain.Batch{Loss: ltrain.LossPG}, "rows"},
		{"no trainable tokens", ltrain.Batch{Loss: ltrain.LossPG, Rows: []ltrain.Row{{Tokens: []int32{1, 2}, Mask: []uint8{0, 0}, Advantages: []float32{0, 0}, OldLogprobs: []float32{0, 0}}}}, "mask"},
		{"plan [[0],[0]]", ltrain.Batch{Loss: ltrain.LossPG, Rows: []ltrain.Row{row()}, Microbatches: [][]int{{0}, {0}}}, "microbatches"},
		{"plan [[]]", ltrain.Batch{Loss: ltrain.LossPG, Rows: []ltrain.Row{row()}, Microbatches: [][]int{{}}}, "microbatches"},
	} {
		_, err := c.TrainStep(context.Background(), tc.b)
		var e *remote.Error
		if !errors.As(err, &e) || (e.Status != 400 && e.Status != 422) || !strings.Contains(err.Error(), tc.mention) {
			t.Fatalf("train_step with %s: %v; want HTTP 400 or 422 naming %s", tc.name, err, tc.mention)
		}
		t.Logf("train_step with %s: %d", tc.name, e.Status)
	}
	// A shape no client would send: [0, 2^60] holds no element, so only a
	// bound on each dimension refuses it.
	hdr := `{"__metadata__":{"loss":"pg"},"tokens":{"dtype":"I32","shape":[0,1152921504606846976],"data_offsets":[0,0]},"mask":{"dtype":"U8","shape":[0,1152921504606846976],"data_offsets":[0,0]},"advantages":{"dtype":"F32","shape":[0,1152921504606846976],"data_offsets":[0,0]},"old_logprobs":{"dtype":"F32","shape":[0,1152921504606846976],"data_offsets":[0,0]},"lengths":{"dtype":"I32","shape":[0],"data_offsets":[0,0]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	body := append([]byte{byte(len(hdr)), byte(len(hdr) >> 8), 0, 0, 0, 0, 0, 0}, hdr...)
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/train_step", tport), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if (resp.StatusCode != 400 && resp.StatusCode != 422) || !strings.Contains(string(msg), "shape") {
		t.Fatalf("train_step with shape [0, 2^60]: HTTP %d %s; want 400 or 422 naming the shape", resp.StatusCode, msg)
	}
	st, err := c.State(context.Background())
	if err != nil || st.Step != 0 {
		t.Fatalf("trainer after refused steps: step %d, %v; want step 0 (nothing trained)", st.Step, err)
	}
}
