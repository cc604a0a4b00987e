package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// chaos is a three-process run (`longhaul serve`, `longhaul serve-trainer`
// and `longhaul train` against them, all started as the README starts
// them) whose processes are SIGKILLed at random moments and started again.
type chaos struct {
	mode  string // run.mode
	steps int
	kills int    // SIGKILLs in all, spread over the three processes
	seed  uint64 // picks the moments and the victims
	// gap bounds how long after its step a kill lands (uniform in [0, gap]).
	gap time.Duration
	// outage, when set, is one generation outage in the middle of a step
	// (the server down that long) instead of random kills.
	outage time.Duration
	extra  []string // key=value for train (all three processes read the config file)
}

type chaosResult struct {
	dir, logs string
	kills     []string
}

// configFor writes the tiny config with run.max_steps and run.mode set.
func configFor(t *testing.T, dir string, steps int, mode string) string {
	t.Helper()
	path := configWithSteps(t, dir, steps)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "mode: deterministic", "mode: "+mode, 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (o chaos) run(t *testing.T, bin, work, cfg string) chaosResult {
	t.Helper()
	tport, gport := proctest.FreePort(t), proctest.FreePort(t)
	procs := map[string]*readmeProc{
		"serve-trainer": startReadme(t, bin, work, tport, "serve-trainer", "--config", cfg),
		"serve":         startReadme(t, bin, work, gport, "serve", "--config", cfg),
	}
	dir := filepath.Join(work, "run")
	args := append([]string{"--config", cfg, "--run-dir", dir,
		"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", gport),
		"trainer.kind=remote", fmt.Sprintf("trainer.url=http://127.0.0.1:%d", tport)}, o.extra...)
	rng := rand.New(rand.NewPCG(o.seed, 0x3b))
	var res chaosResult
	var logs strings.Builder
	deadline := time.Now().Add(5 * time.Minute)
	tp := startTrain(t, bin, work, args...)
	metrics := filepath.Join(dir, "metrics.jsonl")
	if o.outage > 0 {
		// Kill the server once a few steps are in, just after a step
		// started generating (its row is written before generation of the
		// next step begins), keep it away for the outage, start it again.
		if !waitFor(tp.exited, 60*time.Second, func() bool { return proctest.CountLines(metrics) >= 2 }) {
			t.Fatalf("the run ended (or stalled) before step 2:\n%s", tail(tp.out.String(), 40))
		}
		procs["serve"].kill()
		res.kills = append(res.kills, fmt.Sprintf("serve after step %d, away %v", proctest.CountLines(metrics), o.outage))
		time.Sleep(o.outage)
		procs["serve"].start()
	}
	// Kill i lands at a random moment (within gap) after step
	// 1+i*(steps-2)/kills has its row: spread over the run whatever the
	// machine's speed, in every phase of a step.
	killed := 0
	var armed time.Time
	for {
		select {
		case <-tp.exited:
			logs.WriteString(tp.out.String())
			if tp.err != nil {
				t.Fatalf("train exited on its own: %v (kills so far: %v)\n%s", tp.err, res.kills, tail(tp.out.String(), 60))
			}
			res.dir, res.logs = dir, logs.String()
			return res
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not finish in time (kills: %v):\n%s", res.kills, tail(tp.out.String(), 60))
		}
		if killed >= o.kills || o.outage > 0 || proctest.CountLines(metrics) < 1+killed*(o.steps-2)/o.kills {
			continue
		}
		if armed.IsZero() {
			armed = time.Now().Add(o.pause(rng))
		}
		if time.Now().Before(armed) {
			continue
		}
		armed = time.Time{}
		victim := []string{"serve", "serve-trainer", "train"}[rng.IntN(3)]
		step := proctest.CountLines(metrics)
		switch victim {
		case "train":
			tp.cmd.Process.Signal(syscall.SIGKILL)
			<-tp.exited
			logs.WriteString(tp.out.String())
			if tp.err == nil {
				// It finished before the signal landed.
				res.dir, res.logs = dir, logs.String()
				res.kills = append(res.kills, "train (already done)")
				return res
			}
			tp = startTrain(t, bin, work, args...)
		default:
			procs[victim].restart()
		}
		killed++
		res.kills = append(res.kills, victim+"@"+strconv.Itoa(step))
	}
}

func (o chaos) pause(rng *rand.Rand) time.Duration {
	return time.Duration(rng.Int64N(int64(o.gap) + 1))
}

// chaosLong reports whether the long versions run (the CI step script
// sets LONGHAUL_THREEPROC=long).
func chaosLong() bool { return os.Getenv("LONGHAUL_THREEPROC") == "long" }

// TestThreeProcessesKilledDeterministic: serve, serve-trainer and train,
// each SIGKILLed at random moments (seeded, bounded in count) and started
// again with no extra flags, end a deterministic run with the weights,
// trained prompts and calls of the uninterrupted in-process run.
func TestThreeProcessesKilledDeterministic(t *testing.T) {
	bin := binary(t)
	// Seeds 4 and 6 kill each of the three processes within their first
	// four kills.
	o := chaos{mode: "deterministic", steps: 10, kills: 4, seed: 4, gap: 600 * time.Millisecond}
	if chaosLong() {
		o.steps, o.kills = 14, 7
	}
	if s := os.Getenv("LONGHAUL_THREEPROC_SEED"); s != "" {
		o.seed, _ = strconv.ParseUint(s, 10, 64)
	}
	work := t.TempDir()
	cfg := configFor(t, work, o.steps, o.mode)
	ref := filepath.Join(work, "ref")
	train(t, bin, cfg, ref)
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	res := o.run(t, bin, work, cfg)
	t.Logf("seed %d, kills: %v; %s; %d trainer recoveries", o.seed, res.kills, retrySummary(res.logs),
		strings.Count(res.logs, "the trainer lost its state"))
	got, err := Summarize(context.Background(), res.dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("killed three-process run differs from the in-process one: %s\n%s", d, tail(res.logs, 60))
	}
	checkScheduledVersions(t, res.dir, 1)
}

// TestThreeProcessesKilledThroughput: the same kills in throughput mode:
// every step trained with all its groups, no prompt trained twice, no
// logged call generated twice.
func TestThreeProcessesKilledThroughput(t *testing.T) {
	bin := binary(t)
	o := chaos{mode: "throughput", steps: 10, kills: 4, seed: 6, gap: 600 * time.Millisecond}
	if chaosLong() {
		o.steps, o.kills = 14, 7
	}
	if s := os.Getenv("LONGHAUL_THREEPROC_SEED"); s != "" {
		o.seed, _ = strconv.ParseUint(s, 10, 64)
	}
	work := t.TempDir()
	cfg := configFor(t, work, o.steps, o.mode)
	res := o.run(t, bin, work, cfg)
	t.Logf("seed %d, kills: %v; %s; %d trainer recoveries", o.seed, res.kills, retrySummary(res.logs),
		strings.Count(res.logs, "the trainer lost its state"))
	checkTrainedOnce(t, res.dir, int64(o.steps), 4)
	checkNoCallTwice(t, res.dir)
}

// TestGenerationOutage: the only generation server goes away in the middle
// of a step (SIGKILLed, started again after the outage: 30 s in the CI
// step, 4 s here). The run waits (rollout_failure.max_outage_s), drops
// nothing, spends no attempt, and ends equal to the uninterrupted run; the
// stall watchdog's warning meanwhile names the server it waits on.
func TestGenerationOutage(t *testing.T) {
	bin := binary(t)
	// Here the outage also outlasts rollout_failure.call_timeout_s: that
	// bounds one request to a server, not the wait for one.
	o := chaos{mode: "deterministic", steps: 6, outage: 4 * time.Second,
		extra: []string{"rollout_failure.stall_timeout_s=1", "rollout_failure.call_timeout_s=2.5"}}
	if chaosLong() {
		o.steps, o.outage = 6, 30*time.Second
		o.extra = []string{"rollout_failure.stall_timeout_s=10"}
	}
	work := t.TempDir()
	cfg := configFor(t, work, o.steps, o.mode)
	ref := filepath.Join(work, "ref")
	train(t, bin, cfg, ref)
	want, err := Summarize(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	res := o.run(t, bin, work, cfg)
	t.Logf("%v; run took %v; %s", res.kills, time.Since(t0).Round(time.Second), retrySummary(res.logs))
	for _, l := range strings.Split(res.logs, "\n") {
		if strings.Contains(l, "rollout attempt failed") {
			t.Errorf("the outage spent a rollout attempt: %s", l)
			break
		}
	}
	checkTrainedOnce(t, res.dir, int64(o.steps), 4)
	if retried := checkNoCallTwice(t, res.dir); retried != 0 {
		t.Errorf("%d attempts retried during the outage", retried)
	}
	got, err := Summarize(context.Background(), res.dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Errorf("the run across the outage differs from the uninterrupted one: %s", d)
	}
	var stalled string
	for _, l := range strings.Split(res.logs, "\n") {
		if strings.Contains(l, "run stalled") {
			stalled = l
			break
		}
	}
	if !strings.Contains(stalled, "waiting on 1 of 1 servers: http://127.0.0.1:") || !strings.Contains(stalled, "(down") {
		t.Errorf("the stall warning does not name the server it waits on: %q", stalled)
	} else {
		t.Logf("watchdog: %s", stalled)
	}
}
