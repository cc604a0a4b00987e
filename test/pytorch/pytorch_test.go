package pytorch

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/train"
	"github.com/longhaul-rl/longhaul/train/remote"
)

const vocab = 96

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a bound for a hung run only (under load this test took nearly 4 minutes)
	t.Cleanup(cancel)
	return ctx
}

func TestProtocolRoundTrip(t *testing.T) {
	t.Parallel()
	dir := tinyModel(t)
	p := start(t, dir, "--microbatch-tokens", "64")
	ctx := ctxT(t)
	c := remote.New(p.url, remote.Options{})
	st, err := c.State(ctx)
	if err != nil || st != (train.State{}) {
		t.Fatalf("State = %+v, %v; want step 0", st, err)
	}
	b := batch(1, 6, 4, 20, vocab)
	b.Microbatches = [][]int{{0, 1, 2}, {3, 4, 5}}
	want := 0
	for _, r := range b.Rows {
		for _, m := range r.Mask {
			want += int(m)
		}
	}
	ss, err := c.TrainStep(ctx, b)
	if err != nil {
		t.Fatalf("TrainStep: %v\n%s", err, p.logs())
	}
	oc := model.OptimConfig{LR: 0.01, WarmupSteps: 2}
	if ss.Step != 1 || ss.Version != 1 || ss.Tokens != want || ss.LR != oc.LRAt(0) ||
		!(ss.GradNorm > 0) || math.IsNaN(ss.Loss) || ss.ClipFrac < 0 || ss.ClipFrac > 1 {
		t.Fatalf("stats %+v: want step 1, %d tokens, lr %v, a finite loss and grad norm", ss, want, oc.LRAt(0))
	}
	// The extra statistics the Go StepStats does not carry are on the wire.
	raw := postRaw(t, p.url+"/v1/state", "GET", nil, "")
	if !strings.Contains(raw.body, `"step": 1`) {
		t.Fatalf("state: %s", raw.body)
	}

	// The step fence: a second client moves the trainer on; the first one's
	// next step expects step 1 and is refused, not applied twice.
	other := remote.New(p.url, remote.Options{})
	if _, err := other.State(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TrainStep(ctx, batch(2, 2, 4, 8, vocab)); err != nil {
		t.Fatal(err)
	}
	_, err = c.TrainStep(ctx, batch(3, 2, 4, 8, vocab))
	if !errors.Is(err, remote.ErrStepConflict) || failure.ClassOf(err) != failure.Data {
		t.Fatalf("stale step: err = %v, want a step conflict (data)", err)
	}

	// Refusals: 422 (data) naming the row, never 500.
	bad := batch(4, 2, 4, 8, vocab)
	bad.Rows[1].Mask[0] = 1
	if _, err := other.TrainStep(ctx, bad); !isStatus(err, 422) || !strings.Contains(err.Error(), "row 1: mask[0]") {
		t.Fatalf("mask[0]=1: %v", err)
	}
	bad = batch(5, 2, 4, 8, vocab)
	bad.Rows[0].Tokens[2] = vocab
	if _, err := other.TrainStep(ctx, bad); !isStatus(err, 422) || !strings.Contains(err.Error(), "row 0: token 96") {
		t.Fatalf("token out of vocabulary: %v", err)
	}
	bad = batch(6, 2, 4, 8, vocab)
	bad.Microbatches = [][]int{{0}}
	if _, err := other.TrainStep(ctx, bad); !isStatus(err, 422) || !strings.Contains(err.Error(), "microbatches") {
		t.Fatalf("microbatches missing a row: %v", err)
	}
	for _, tc := range []struct {
		route, method, ctype, body string
		status                     int
		want                       string
	}{
		{"/v1/train_step", "POST", "application/octet-stream", "\x08\x00\x00\x00\x00\x00\x00\x00{}      ", 400, "lacks tensor"},
		{"/v1/train_step", "POST", "application/octet-stream", "xx", 400, "header length"},
		{"/v1/save_checkpoint", "POST", "application/json", `{"path":"x"}`, 400, `'dir' is required`},
		{"/v1/export_weights", "POST", "application/json", `[1]`, 400, "JSON object"},
		{"/v1/load_checkpoint", "POST", "application/json", `{"dir":"` + t.TempDir() + `"}`, 422, "trainer.json"},
		// The trainer-side fence of a save or export (the trainer is at step 2).
		{"/v1/export_weights", "POST", "application/json", `{"path":"` + filepath.Join(t.TempDir(), "m.safetensors") + `","expect_step":7}`, 409, "step_conflict"},
		{"/v1/save_checkpoint", "POST", "application/json", `{"dir":"` + t.TempDir() + `","expect_step":-1}`, 400, "expect_step"},
		{"/v1/export_weights", "POST", "application/json", `{"path":"` + filepath.Join(t.TempDir(), "m.safetensors") + `","expect_step":2,"expect_warm_step":5}`, 409, "warm-start step 0"},
		{"/v1/state", "POST", "", "", 405, "takes GET"},
		{"/v1/nope", "GET", "", "", 404, "unknown route"},
	} {
		r := postRaw(t, p.url+tc.route, tc.method, []byte(tc.body), tc.ctype)
		if r.status != tc.status || !strings.Contains(r.body, tc.want) {
			t.Errorf("%s %s %q: %d %s; want %d containing %q", tc.method, tc.route, tc.body, r.status, r.body, tc.status, tc.want)
		}
	}

	// Checkpoint and export through the client.
	ck := filepath.Join(t.TempDir(), "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	// The first client still expects step 1: the trainer is not where it
	// thinks, so it must not save the trainer's weights as its own.
	var re *remote.RestartedError
	if err := c.SaveCheckpoint(ctx, ck); !errors.As(err, &re) || re.Want != 1 || re.Got != 2 {
		t.Fatalf("save by the client left at step 1: %v; want a RestartedError (want 1, got 2)", err)
	}
	c = other
	if err := c.SaveCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveCheckpoint(ctx, ck); !isStatus(err, 422) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("second save into the same dir: %v", err)
	}
	if err := c.LoadCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx); err != nil || st.Step != 2 {
		t.Fatalf("after load: %+v %v", st, err)
	}
	exp := filepath.Join(t.TempDir(), "model.safetensors")
	if err := c.ExportWeights(ctx, exp); err != nil {
		t.Fatal(err)
	}
	names := safetensorsNames(t, exp)
	for _, n := range []string{"model.embed_tokens.weight", "model.layers.1.self_attn.k_norm.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight"} {
		if _, ok := names[n]; !ok {
			t.Errorf("export lacks HF tensor %q", n)
		}
	}
	var cfg map[string]any
	b2, err := os.ReadFile(filepath.Join(filepath.Dir(exp), "config.json"))
	if err != nil || json.Unmarshal(b2, &cfg) != nil || cfg["model_type"] != "qwen3" {
		t.Fatalf("exported config.json: %v %s", err, b2)
	}
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	p := start(t, tinyModel(t), "--api-key", "sekrit")
	ctx := ctxT(t)
	if _, err := remote.New(p.url, remote.Options{}).State(ctx); !isStatus(err, 401) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := remote.New(p.url, remote.Options{APIKey: "sekrit"}).State(ctx); err != nil {
		t.Fatal(err)
	}
	if r := postRaw(t, p.url+"/health", "GET", nil, ""); r.status != 200 {
		t.Fatalf("health needs no key: %d", r.status)
	}
}

// run takes steps [from, to) of the fixed schedule, saving a checkpoint into
// ckAt's directory when the trainer reaches step ckAtStep.
func run(t *testing.T, c *remote.Client, from, to int, ckAtStep int, ck string) {
	t.Helper()
	ctx := ctxT(t)
	for k := from; k < to; k++ {
		if _, err := c.TrainStep(ctx, batch(uint64(100+k), 5, 4, 24, vocab)); err != nil {
			t.Fatalf("step %d: %v", k+1, err)
		}
		if k+1 == ckAtStep {
			if err := os.MkdirAll(ck, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := c.SaveCheckpoint(ctx, ck); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func export(t *testing.T, c *remote.Client) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := c.ExportWeights(ctxT(t), path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExactResume: a run straight through and a fresh process resumed from
// the step-2 checkpoint export byte-identical weights after step 4.
func TestExactResume(t *testing.T) {
	t.Parallel()
	dir := tinyModel(t)
	ck := filepath.Join(t.TempDir(), "ck")
	a := remote.New(start(t, dir).url, remote.Options{})
	run(t, a, 0, 4, 2, ck)
	want := export(t, a)

	b := remote.New(start(t, dir).url, remote.Options{})
	if err := b.LoadCheckpoint(ctxT(t), ck); err != nil {
		t.Fatal(err)
	}
	run(t, b, 2, 4, -1, "")
	if got := export(t, b); !bytes.Equal(got, want) {
		t.Fatal("resumed weights differ from the straight run")
	}
	// The check has teeth: one step fewer gives other weights.
	c := remote.New(start(t, dir, "--resume", ck).url, remote.Options{})
	run(t, c, 2, 3, -1, "")
	if bytes.Equal(export(t, c), want) {
		t.Fatal("3 steps gave the weights of 4")
	}
}

// TestSIGKILLRestart: the trainer is SIGKILLed while a step is in flight,
// restarted with --resume from its last checkpoint, resynchronised with
// State, and finishes with the weights of a run that was never killed.
func TestSIGKILLRestart(t *testing.T) {
	t.Parallel()
	dir := tinyModel(t)
	ref := remote.New(start(t, dir).url, remote.Options{})
	run(t, ref, 0, 4, -1, "")
	want := export(t, ref)

	ck := filepath.Join(t.TempDir(), "ck")
	p := start(t, dir)
	// A short outage limit: the client waits for a trainer that is gone,
	// then reports it (a longer one waits for the restart instead).
	c := remote.New(p.url, remote.Options{MaxOutage: 3 * time.Second, MinBackoff: 50 * time.Millisecond})
	run(t, c, 0, 3, 2, ck)
	// A big step keeps the trainer busy; kill it mid-step, once it has
	// spent 0.3 s of CPU since the step was sent (it is computing it). A
	// fixed sleep before the kill let a fast machine finish the step first.
	pid := p.cmd.Process.Pid
	cpu0 := procCPU(t, pid)
	errc := make(chan error, 1)
	go func() {
		_, err := c.TrainStep(context.Background(), batch(7, 256, 200, 256, vocab))
		errc <- err
	}()
	for deadline := time.Now().Add(time.Minute); procCPU(t, pid)-cpu0 < 300*time.Millisecond; {
		select {
		case err := <-errc:
			t.Fatalf("the step ended (%v) before the trainer had spent 0.3 s of CPU on it: make it bigger", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the trainer never got to work on the step")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the step finished before the kill: make it bigger")
		}
		if failure.ClassOf(err) != failure.Infra {
			t.Fatalf("killed mid-step: %v, want an infra error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("client did not notice the kill")
	}
	<-p.done
	q := start(t, dir, "--resume", ck)
	c2 := remote.New(q.url, remote.Options{})
	st, err := c2.State(ctxT(t))
	if err != nil || st.Step != 2 {
		t.Fatalf("restarted trainer at %+v, %v; want step 2", st, err)
	}
	run(t, c2, 2, 4, -1, "")
	if !bytes.Equal(export(t, c2), want) {
		t.Fatal("weights after kill and resume differ from the run without a kill")
	}
}

// procCPU is the CPU time (user + system, every thread) process pid has
// used, from /proc/PID/stat (clock ticks of 10 ms).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

type rawReply struct {
	status int
	body   string
}

func postRaw(t *testing.T, url, method string, body []byte, ctype string) rawReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawReply{resp.StatusCode, string(b)}
}

func isStatus(err error, status int) bool {
	var e *remote.Error
	return errors.As(err, &e) && e.Status == status
}

func safetensorsNames(t *testing.T, path string) map[string]json.RawMessage {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 8 {
		t.Fatalf("%s: %v", path, err)
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestTorchrunGloo: `torchrun --nproc_per_node 2` on the gloo backend, rank 0
// serving HTTP, takes the same steps as one process: the step statistics
// agree to 1e-5 relative and the weights to float32 rounding (the gradient
// is summed across ranks in another order). Microbatch j runs on rank j % 2.
func TestTorchrunGloo(t *testing.T) {
	t.Parallel()
	dir := tinyModel(t)
	// Debian's torch 1.13 on Python 3.11 crashes in the launcher's default
	// output redirection (an IntFlag change); --redirects/--tee 1 avoid it.
	launcher := []string{"-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
		"--redirects", "1", "--tee", "1", "--log_dir", t.TempDir()}
	dp := remote.New(startWith(t, launcher, dir).url, remote.Options{})
	one := remote.New(start(t, dir).url, remote.Options{})
	ctx := ctxT(t)
	for k := range 3 {
		b := batch(uint64(200+k), 6, 4, 24, vocab)
		b.Microbatches = [][]int{{0, 1}, {2, 3}, {4}, {5}}
		s1, err := one.TrainStep(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := dp.TrainStep(ctx, b)
		if err != nil {
			t.Fatalf("2 ranks, step %d: %v", k+1, err)
		}
		if s1.Step != s2.Step || s1.Tokens != s2.Tokens || s1.LR != s2.LR || relDiff(s1.Loss, s2.Loss) > 1e-5 || relDiff(s1.GradNorm, s2.GradNorm) > 1e-5 {
			t.Fatalf("step %d: one process %+v, two ranks %+v", k+1, s1, s2)
		}
	}
	w1, w2 := f32Tensors(t, export(t, one)), f32Tensors(t, export(t, dp))
	for name, a := range w1 {
		b := w2[name]
		if len(a) != len(b) {
			t.Fatalf("%s: %d vs %d values", name, len(a), len(b))
		}
		for i := range a {
			if d := math.Abs(float64(a[i] - b[i])); d > 1e-5 {
				t.Fatalf("%s[%d]: one process %v, two ranks %v", name, i, a[i], b[i])
			}
		}
	}
	// A checkpoint load reaches every rank: both continue in step.
	ck := filepath.Join(t.TempDir(), "ck")
	if err := dp.SaveCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if err := dp.LoadCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if _, err := dp.TrainStep(ctx, batch(300, 4, 4, 16, vocab)); err != nil {
		t.Fatal(err)
	}
}

func relDiff(a, b float64) float64 {
	return math.Abs(a-b) / math.Max(math.Abs(a), 1e-12)
}

// f32Tensors decodes the F32 tensors of a safetensors file.
func f32Tensors(t *testing.T, b []byte) map[string][]float32 {
	t.Helper()
	n := binary.LittleEndian.Uint64(b)
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	out := map[string][]float32{}
	for name, raw := range h {
		var e struct {
			Dtype   string `json:"dtype"`
			Offsets [2]int `json:"data_offsets"`
		}
		if name == "__metadata__" || json.Unmarshal(raw, &e) != nil || e.Dtype != "F32" {
			continue
		}
		v := make([]float32, (e.Offsets[1]-e.Offsets[0])/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[e.Offsets[0]+4*i:]))
		}
		out[name] = v
	}
	return out
}
