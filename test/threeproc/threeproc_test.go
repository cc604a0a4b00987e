// Package threeproc runs longhaul's three processes on loopback: the
// controller (`longhaul train`), generation (`longhaul serve --model DIR`,
// a tiny random Qwen3 with the real Qwen3 tokenizer) and training (the
// PyTorch trainer, python/longhaul_trainer), and SIGKILLs each of them at
// seeded random moments. CI runs it in .ci/steps/15-threeproc.sh.
package threeproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/testkit/crashtest"
	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// The run: the ledger task, deterministic mode, a warm start of 10 steps
// of 4 demonstrations through the trainer protocol, 4 steps of 2 groups of 4,
// a checkpoint every other step (a kill rewinds up to two steps). The model is biased towards digits
// (bias_digits.py) and answers one token per turn, so some answers are
// right, rewards differ within a group and the loss gradient is not zero;
// AdamW's decoupled weight decay (high on purpose) also moves the weights
// at a step whose advantages are all zero. Every version differs from the
// last, and a step applied twice or lost shows in the weights and in every
// later logprob.
var runArgs = []string{
	"compaction.enabled=false", "warmstart.steps=10", "warmstart.batch_size=4", "warmstart.lr=1e-2", "run.max_steps=4", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
	"sampling.max_tokens_per_call=1", "rollout.max_turns=2", "checkpointing.save_period=2", "checkpointing.keep_last_k=2",
	"optim.lr=0.01", "optim.weight_decay=0.5", "optim.warmup_steps=0", "optim.schedule=constant",
	// A restarted server or trainer is back in seconds; calls wait it out.
	"rollout_failure.backoff_base_s=0.1", "rollout_failure.backoff_cap_s=0.5",
}

// warmSteps is runArgs' warmstart.steps.
const warmSteps = 10

// The PyTorch trainer's flags for the same optimizer and loss as the
// config (docs/config.md defaults plus runArgs).
var trainerFlags = []string{"--threads", "1", "--device", "cpu", "--lr", "0.01", "--min-lr", "0.0001", "--warmup-steps", "0",
	"--schedule", "constant", "--weight-decay", "0.5", "--beta1", "0.9", "--beta2", "0.99", "--eps", "1e-8",
	"--grad-clip", "1", "--clip-low", "0.2", "--clip-high", "0.28", "--norm", "token_mean", "--log-level", "WARNING"}

type setup struct {
	py, bin, model, cfg string
	args                []string      // the run's config overrides
	flags               []string      // the PyTorch trainer's optimizer and loss flags (the same settings)
	limit               time.Duration // a run's wall-time limit (0: 4 minutes)
}

func (s setup) server(t *testing.T, out *proctest.Buffer, port int, allow string) *proctest.Proc {
	t.Helper()
	p := proctest.Launch(t, "server", out, nil, s.bin, "serve", "--model", s.model, "--port", fmt.Sprint(port), "--allow-path", allow)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitHealthy(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", port)); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s setup) trainer(t *testing.T, out *proctest.Buffer, port int) *proctest.Proc {
	t.Helper()
	env := []string{"PYTHONPATH=" + filepath.Join(root(), "python"), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1"}
	p := proctest.Launch(t, "trainer", out, env, append([]string{s.py, "-m", "longhaul_trainer", "--model", s.model, "--port", fmt.Sprint(port)}, s.flags...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.WaitHealthy(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", port)); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s setup) controller(t *testing.T, out *proctest.Buffer, dir string, extra ...string) *proctest.Proc {
	t.Helper()
	args := append([]string{s.bin, "train", "--config", s.cfg, "--run-dir", dir, "--no-progress", "--log-level", "warn",
		"model.path=" + s.model}, s.args...)
	return proctest.Launch(t, "controller", out, nil, append(args, extra...)...)
}

// kill is one scheduled SIGKILL: which process, how long after the
// previous kill (or the start), and, when warm[1] > 0, only while the
// trainer's warm start is between steps warm[0] and warm[1] (excluded).
type kill struct {
	who   string
	after time.Duration
	warm  [2]int
}

// trainerWarm reads the trainer's warm-start steps and RL step.
func trainerWarm(port int) (warm int, step int64, err error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/state", port))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Step     int64 `json:"step"`
		WarmStep int   `json:"warm_step"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, 0, err
	}
	return st.WarmStep, st.Step, nil
}

// runThree runs the three processes until the controller finishes the run
// in dir, delivering kills in order; a killed server or trainer is started
// again at once on its port (the server from the original directory, at
// version 0: the controller brings it to the current version), a killed
// controller resumes the run. It returns the kills that landed (the run may end before all have:
// the caller compares it, then fails).
func (s setup) runThree(t *testing.T, dir string, kills []kill) (landed []string, took time.Duration) {
	t.Helper()
	out := &proctest.Buffer{}
	defer func() {
		if t.Failed() {
			t.Logf("process output:\n%s", proctest.Tail(out.String(), 12000))
		}
	}()
	sport, tport := proctest.FreePort(t), proctest.FreePort(t)
	start := time.Now()
	srv := s.server(t, out, sport, filepath.Dir(dir))
	tr := s.trainer(t, out, tport)
	urls := []string{"trainer.kind=remote", fmt.Sprintf("trainer.url=http://127.0.0.1:%d", tport),
		"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", sport), "generator.model=" + filepath.Base(s.model)}
	ctrl := s.controller(t, out, dir, urls...)
	otherKilled := false // since the controller started
	restarts := 0
	limit := s.limit
	if limit == 0 {
		limit = 4 * time.Minute
	}
	deadline := time.After(limit)
	next := func() <-chan time.Time {
		if len(landed) < len(kills) {
			return time.After(kills[len(landed)].after)
		}
		return nil
	}
	timer := next()
	for {
		select {
		case <-ctrl.Done:
			if ctrl.Err == nil {
				// A run that ended before all its kills landed is still
				// returned: the caller compares it first, then fails.
				took := time.Since(start)
				srv.Kill() // done with: their CPU goes to the next run
				tr.Kill()
				return landed, took
			}
			// A trainer that came back at another step fails the
			// controller's step (remote.RestartedError); it is restarted
			// like a killed one and resumes from its checkpoint.
			if !otherKilled || restarts >= 8 {
				t.Fatalf("controller failed: %v\n%s", ctrl.Err, proctest.Tail(out.String(), 6000))
			}
			restarts++
			otherKilled = false
			t.Logf("controller exited after a kill of another process (restarted): %v: %s", ctrl.Err, proctest.LastLine(out.String(), "longhaul:"))
			ctrl = s.controller(t, out, dir, urls...)
		case <-timer:
			k := kills[len(landed)]
			if k.warm[1] > 0 {
				// A kill during the warm start: once the trainer has taken
				// warm[0] of its steps and fewer than warm[1].
				w, step, err := trainerWarm(tport)
				if err == nil && (step != 0 || w >= k.warm[1]) {
					t.Fatalf("the warm start got past warm step %d (at %d, RL step %d) before the kill of the %s: make it longer", k.warm[1], w, step, k.who)
				}
				if err != nil || w < k.warm[0] {
					timer = time.After(20 * time.Millisecond)
					continue
				}
			}
			switch k.who {
			case "controller":
				if !ctrl.Kill() {
					continue // it is exiting on its own; the case above takes it
				}
				otherKilled = false
				ctrl = s.controller(t, out, dir, urls...)
			case "server":
				srv.Kill()
				otherKilled = true
				srv = s.server(t, out, sport, filepath.Dir(dir))
			case "trainer":
				tr.Kill()
				otherKilled = true
				tr = s.trainer(t, out, tport)
			}
			at := fmt.Sprintf("step %d logged", proctest.CountLines(filepath.Join(dir, "metrics.jsonl")))
			if k.warm[1] > 0 {
				at = fmt.Sprintf("during the warm start, after warm step %d", k.warm[0])
				if k.warm[0] >= warmSteps {
					at = "after the warm start, before RL step 1"
				}
			}
			landed = append(landed, fmt.Sprintf("%s after %s (%s)", k.who, k.after.Round(time.Millisecond), at))
			timer = next()
		case <-deadline:
			t.Fatalf("the run did not finish in %v (kills %v)", limit, landed)
		}
	}
}

// schedule draws one kill of each process in a seeded order, each a
// seeded fraction of the uninterrupted run's wall time after the last.
func schedule(seed uint64, ref time.Duration) []kill {
	r := rand.New(rand.NewPCG(seed, 0x3770c))
	who := []string{"controller", "server", "trainer"}
	r.Shuffle(len(who), func(i, j int) { who[i], who[j] = who[j], who[i] })
	ks := make([]kill, len(who))
	for i, w := range who {
		ks[i] = kill{who: w, after: time.Duration(float64(ref) * (0.12 + 0.13*r.Float64()))}
	}
	return ks
}

func TestThreeProcessesPyTorchKilled(t *testing.T) {
	py, tokDir, bin := need(t)
	work := t.TempDir()
	s := setup{py: py, bin: bin, model: filepath.Join(work, "qwen3-tiny"), cfg: filepath.Join(root(), "examples", "ledger-tiny.yaml"),
		args: runArgs, flags: trainerFlags}
	if out, err := exec.Command(bin, "init-model", "--family", "qwen3", "--layers", "1", "--hidden", "16", "--heads", "2",
		"--kv-heads", "1", "--untied", "--tokenizer", tokDir, "--out", s.model).CombinedOutput(); err != nil {
		t.Fatalf("init-model: %v\n%s", err, out)
	}
	bias := exec.Command(py, filepath.Join(root(), "test", "threeproc", "bias_digits.py"), s.model, "3.0")
	bias.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root(), "python"), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := bias.CombinedOutput(); err != nil {
		t.Fatalf("bias_digits.py: %v\n%s", err, out)
	}
	seed := uint64(15)
	if v := os.Getenv("LONGHAUL_THREEPROC_SEED"); v != "" {
		fmt.Sscan(v, &seed)
	}

	// The same task in one process (Go trainer and generator on the same
	// HF weights), alongside the reference: compared at the end.
	inproc := filepath.Join(work, "runs", "inprocess")
	inprocErr := make(chan error, 1)
	go func() {
		cmd := exec.Command(bin, append([]string{"train", "--config", s.cfg, "--run-dir", inproc, "--no-progress", "--log-level", "warn",
			"model.path=" + s.model}, runArgs...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("in-process run: %w\n%s", err, out)
		}
		inprocErr <- err
	}()

	ref := filepath.Join(work, "runs", "reference")
	_, took := s.runThree(t, ref, nil)
	t.Logf("uninterrupted three-process run: %s", took.Round(time.Millisecond))
	want, err := crashtest.Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if want.Steps != 4 || want.Calls == 0 || want.WeightsSHA256 == "" {
		t.Fatalf("reference run incomplete: %+v", want)
	}
	checkVersionsMove(t, ref)
	var trained bool
	for _, m := range readMetrics(t, ref) {
		trained = trained || m.GradNorm > 0
	}
	if !trained {
		t.Fatal("no step of the reference run had a non-zero gradient: the loss path was not exercised (rewards never differed)")
	}

	killed := filepath.Join(work, "runs", "killed")
	// The controller and then the trainer are killed during the warm
	// start (the controller resumes it where the trainer is; the restarted
	// trainer is at warm step 0 and the warm start is done again), then
	// each process once at a seeded moment.
	// The third kill lands after the warm start and before RL step 1: the
	// restarted trainer is at step 0 like the warm-started one, and only
	// its warm count tells them apart (train/remote's warm fence).
	kills := append([]kill{{who: "controller", warm: [2]int{2, warmSteps}}, {who: "trainer", warm: [2]int{4, warmSteps}},
		{who: "trainer", warm: [2]int{warmSteps, warmSteps + 1}}}, schedule(seed, took)...)
	landed, took2 := s.runThree(t, killed, kills)
	t.Logf("killed run (seed %d): %s; kills: %s", seed, took2.Round(time.Millisecond), strings.Join(landed, "; "))
	got, err := crashtest.Summarize(context.Background(), killed)
	if err != nil {
		t.Fatal(err)
	}
	if d := crashtest.Compare(want, got); d != "" {
		t.Fatalf("the killed three-process run differs from the uninterrupted one: %s", d)
	}
	if len(landed) < len(kills) {
		t.Fatalf("the run finished after %d of %d kills (%v): make it longer", len(landed), len(kills), landed)
	}
	t.Logf("identical: %d steps, %d calls, calls %s, weights %s", got.Steps, got.Calls, got.CallsSHA256[:16], got.WeightsSHA256[:16])

	if err := <-inprocErr; err != nil {
		t.Fatal(err)
	}
	compareInProcess(t, ref, inproc)
}

// checkVersionsMove: every step published a new version and the calls of
// later steps were served by it (so the digests compare trained weights).
func checkVersionsMove(t *testing.T, dir string) {
	t.Helper()
	byV := callDigests(t, dir)
	if len(byV) < 4 {
		t.Fatalf("calls were served by %d versions, want ≥ 4: %v", len(byV), keys(byV))
	}
}

// callDigests hashes the logged calls per weight version, in (rollout,
// call) order.
func callDigests(t *testing.T, dir string) map[int64]string {
	t.Helper()
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type rec struct {
		key string
		sum [32]byte
	}
	recs := map[int64][]rec{}
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		c, ok := ev.(runlog.CallFinished)
		if !ok {
			return nil
		}
		b, _ := json.Marshal(struct {
			P    uint32
			S, T []int32
			L    []float32
		}{c.PromptPrefix, c.PromptSuffix, c.Sampled, c.Logprobs})
		recs[c.Version] = append(recs[c.Version], rec{fmt.Sprintf("%08d/%08d/%08d", c.Rollout.Group, c.Rollout.Member, c.Call), sha256.Sum256(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for v, rs := range recs {
		slices.SortFunc(rs, func(a, b rec) int { return strings.Compare(a.key, b.key) })
		h := sha256.New()
		for _, r := range rs {
			h.Write([]byte(r.key))
			h.Write(r.sum[:])
		}
		out[v] = hex.EncodeToString(h.Sum(nil))[:16]
	}
	return out
}

func keys(m map[int64]string) []int64 {
	var ks []int64
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// readMetrics reads the run's metrics.jsonl.
func readMetrics(t *testing.T, dir string) []metrics.Step {
	t.Helper()
	ms, err := metrics.Read(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// compareInProcess relates the three-process run to the in-process one.
// Both warm-start the same weights on the same demonstrations, but with
// different trainers (PyTorch and Go agree to ~1e-6, not bit for bit), so
// from version 0 on their calls, rewards and weights may differ: they are
// reported, with the per-step metrics side by side, not required equal
// (TestThreeProcessesLearn compares what the runs learn).
func compareInProcess(t *testing.T, three, inproc string) {
	t.Helper()
	a, b := callDigests(t, three), callDigests(t, inproc)
	if a[0] == "" || b[0] == "" {
		t.Fatalf("no version-0 calls: three-process %q, in-process %q", a[0], b[0])
	}
	same := 0
	for _, v := range keys(a) {
		if a[v] == b[v] {
			same++
		}
	}
	t.Logf("calls per version identical in %d of %d versions (three-process %v, in-process %v)", same, len(a), a, b)
	sa, err := crashtest.Summarize(context.Background(), three)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := crashtest.Summarize(context.Background(), inproc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("final weights file: three-process %s, in-process %s (equal bytes: %v)", sa.WeightsSHA256[:16], sb.WeightsSHA256[:16], sa.WeightsSHA256 == sb.WeightsSHA256)
	// The files come from different writers (PyTorch's export, the Go
	// trainer's); their tensors are compared by value.
	ta, errA := model.LoadDir(filepath.Join(three, "weights"))
	tb, errB := model.LoadDir(filepath.Join(inproc, "weights"))
	if errA != nil || errB != nil {
		t.Fatalf("loading the final weights: %v, %v", errA, errB)
	}
	var maxDiff float64
	for _, name := range ta.TensorNames() {
		x, y := ta.Tensor(name), tb.Tensor(name)
		for i := range x {
			maxDiff = math.Max(maxDiff, math.Abs(float64(x[i])-float64(y[i])))
		}
	}
	t.Logf("final weights by value: max |three-process - in-process| = %g over %d parameters", maxDiff, ta.NumParams())
	ma, mb := readMetrics(t, three), readMetrics(t, inproc)
	if len(ma) != len(mb) {
		t.Fatalf("metrics: %d steps three-process, %d in-process", len(ma), len(mb))
	}
	for i := range ma {
		t.Logf("step %d: reward %.3f / %.3f, success %.2f / %.2f, generated tokens %d / %d, loss %.3g / %.3g, grad norm %.3g / %.3g (three-process / in-process)",
			ma[i].Step, ma[i].RewardMean, mb[i].RewardMean, ma[i].SuccessRate, mb[i].SuccessRate, ma[i].GeneratedTokens, mb[i].GeneratedTokens,
			ma[i].Loss, mb[i].Loss, ma[i].GradNorm, mb[i].GradNorm)
	}
}
