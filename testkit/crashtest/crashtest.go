// Package crashtest proves guarantee 1 of docs/resume.md with real
// processes: a deterministic run killed with SIGKILL at random moments and
// resumed after each kill must end exactly like an uninterrupted run: the
// same weights digest, the same per-step lists of trained prompts, and the
// same token sequences in every logged call.
//
// Kills come from two sources so that every phase is hit: a timer in the
// parent (mostly lands during generation, the bulk of the wall time), and
// crash points armed in the child through the environment (LONGHAUL_CRASH_AT
// = point:n makes the child SIGKILL itself at the n-th time it reaches the
// point: inside a training step, while a checkpoint is being written, at
// the start of a snapshot).
package crashtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/runlog"
)

// EnvCrashAt names the environment variable a child reads its crash point from.
const EnvCrashAt = "LONGHAUL_CRASH_AT"

// Points are the crash points the controller exposes.
var Points = []string{"call.logged", "train.before", "checkpoint.write", "snapshot.write", "train.after", "snapshot.before", "seals.staged"}

// CrashHook returns the hook a child process installs: it SIGKILLs the
// process at the n-th hit of the point named in spec ("point:n"); nil when
// spec is empty.
func CrashHook(spec string) (func(string), error) {
	if spec == "" {
		return nil, nil
	}
	point, ns, ok := strings.Cut(spec, ":")
	n, err := strconv.Atoi(ns)
	if !ok || err != nil || n < 1 {
		return nil, fmt.Errorf("%s=%q: want point:n with n ≥ 1", EnvCrashAt, spec)
	}
	hits := 0
	return func(p string) {
		if p != point {
			return
		}
		if hits++; hits == n {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}, nil
}

// EnvGenTrace names the environment variable that makes a child append the
// sampling seed of every generator request it makes to a file, one decimal
// per line. A request's seed is rollout.SampleSeed(run seed, rollout, call)
// whatever the attempt, so a seed traced by a process started after that
// call was logged is a logged call generated again.
const EnvGenTrace = "LONGHAUL_GEN_TRACE"

// GenTrace returns the generator wrapper a child installs for the trace
// file path (nil when path is empty). Each line is one unbuffered write:
// what was written survives the SIGKILL of the writer.
func GenTrace(path string) (func(gen.Generator) gen.Generator, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvGenTrace, err)
	}
	return func(g gen.Generator) gen.Generator { return tracingGen{g: g, f: f} }, nil
}

// tracingGen needs no lock: an O_APPEND write of one buffer is atomic
// with respect to other appends to the same file.
type tracingGen struct {
	g gen.Generator
	f *os.File
}

func (t tracingGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	var b []byte
	for _, r := range reqs {
		b = strconv.AppendUint(b, r.Seed, 10)
		b = append(b, '\n')
	}
	if _, err := t.f.Write(b); err != nil {
		return nil, fmt.Errorf("crashtest: generator trace: %w", err)
	}
	return t.g.Generate(ctx, reqs)
}

// Options configure a crash test.
type Options struct {
	Binary    string   // the longhaul binary
	Config    string   // config file for both runs
	Overrides []string // key=value arguments for both runs
	Kills     int
	Seed      uint64
	Dir       string // working directory for the two run directories
	Log       io.Writer
}

// Result is what Run found.
type Result struct {
	Identical  bool
	Difference string // the first difference, when not identical
	Kills      []string
	Reference  Summary
	Resumed    Summary
}

// Summary is what two runs must agree on.
type Summary struct {
	WeightsSHA256 string
	Trained       []runlog.TrainedReport
	CallsSHA256   string
	Calls         uint64
	Steps         int64
}

// Run runs the reference and the killed runs and compares them.
func Run(ctx context.Context, o Options) (Result, error) {
	var res Result
	if o.Log == nil {
		o.Log = io.Discard
	}
	ref := filepath.Join(o.Dir, "reference")
	killed := filepath.Join(o.Dir, "killed")
	for _, d := range []string{ref, killed} {
		if err := os.RemoveAll(d); err != nil {
			return res, err
		}
	}
	t0 := time.Now()
	if _, err := o.start(ctx, ref, "").wait(); err != nil {
		return res, fmt.Errorf("crashtest: reference run: %w", err)
	}
	refDur := time.Since(t0)
	fmt.Fprintf(o.Log, "reference run: %s\n", refDur.Round(time.Millisecond))

	var err error
	if res.Kills, err = o.KillAndResume(ctx, killed, refDur); err != nil {
		return res, err
	}
	if res.Reference, err = Summarize(ctx, ref); err != nil {
		return res, err
	}
	if res.Resumed, err = Summarize(ctx, killed); err != nil {
		return res, err
	}
	res.Difference = Compare(res.Reference, res.Resumed)
	res.Identical = res.Difference == ""
	return res, nil
}

type proc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	killed chan struct{}
	err    error
}

func (o Options) start(ctx context.Context, dir, crashAt string, env ...string) *proc {
	args := []string{"train", "--run-dir", dir, "--no-progress", "--log-level", "warn"}
	if o.Config != "" {
		args = append(args, "--config", o.Config)
	}
	args = append(args, o.Overrides...)
	p := &proc{killed: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, o.Binary, args...)
	p.cmd.Env = append(append(os.Environ(), EnvCrashAt+"="+crashAt), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.err = p.cmd.Start()
	return p
}

func (p *proc) killAfter(d time.Duration) {
	go func() {
		time.Sleep(d)
		if p.cmd.Process != nil && p.cmd.Process.Signal(syscall.SIGKILL) == nil {
			close(p.killed)
		}
	}()
}

// wait returns "killed" when the process died of SIGKILL, "" when it
// exited cleanly, or the error with its output.
func (p *proc) wait() (string, error) {
	if p.err != nil {
		return "", p.err
	}
	err := p.cmd.Wait()
	if err == nil {
		return "", nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return "killed", nil
		}
	}
	return "", fmt.Errorf("%w\n%s", err, p.out.String())
}

// Summarize reads what a finished run directory must agree on.
func Summarize(ctx context.Context, dir string) (Summary, error) {
	rep, err := runlog.Inspect(ctx, dir)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{WeightsSHA256: rep.WeightsSHA256, Trained: rep.Trained, Calls: rep.CallsGenerated, Steps: rep.Step}
	s.CallsSHA256, err = CallsDigest(ctx, dir)
	return s, err
}

// CallsDigest hashes every logged call's tokens and logprobs in a canonical
// order (rollout, call index), so two logs that hold the same calls in a
// different interleaving agree.
func CallsDigest(ctx context.Context, dir string) (string, error) {
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		return "", err
	}
	defer l.Close()
	type rec struct {
		id   runlog.RolloutID
		call uint32
		sum  [32]byte
	}
	var recs []rec
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		c, ok := ev.(runlog.CallFinished)
		if !ok {
			return nil
		}
		b, err := json.Marshal(struct {
			P      uint32
			S, T   []int32
			L      []float32
			F      string
			V      int64
			Sel    bool
			Reject string
		}{c.PromptPrefix, c.PromptSuffix, c.Sampled, c.Logprobs, c.Finish, c.Version, c.Selected, c.Reject})
		if err != nil {
			return err
		}
		recs = append(recs, rec{c.Rollout, c.Call, sha256.Sum256(b)})
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.SortFunc(recs, func(a, b rec) int {
		switch {
		case a.id.Group != b.id.Group:
			return cmpU(uint64(a.id.Group), uint64(b.id.Group))
		case a.id.Member != b.id.Member:
			return cmpU(uint64(a.id.Member), uint64(b.id.Member))
		}
		return cmpU(uint64(a.call), uint64(b.call))
	})
	h := sha256.New()
	for _, r := range recs {
		fmt.Fprintf(h, "%d/%d/%d:", r.id.Group, r.id.Member, r.call)
		h.Write(r.sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Compare returns the first difference between two summaries, or "".
func Compare(a, b Summary) string {
	if a.Steps != b.Steps {
		return fmt.Sprintf("steps: reference %d, resumed %d", a.Steps, b.Steps)
	}
	for i := 0; i < min(len(a.Trained), len(b.Trained)); i++ {
		x, y := a.Trained[i], b.Trained[i]
		if x.Step != y.Step || !slices.Equal(x.PromptIDs, y.PromptIDs) || !slices.Equal(x.GroupIDs, y.GroupIDs) {
			return fmt.Sprintf("trained step %d: reference prompts %v, resumed step %d prompts %v", x.Step, x.PromptIDs, y.Step, y.PromptIDs)
		}
	}
	if len(a.Trained) != len(b.Trained) {
		return fmt.Sprintf("trained steps: reference %d, resumed %d", len(a.Trained), len(b.Trained))
	}
	if a.CallsSHA256 != b.CallsSHA256 {
		return fmt.Sprintf("logged calls differ: reference %d calls (%s), resumed %d calls (%s)", a.Calls, a.CallsSHA256[:12], b.Calls, b.CallsSHA256[:12])
	}
	if a.WeightsSHA256 != b.WeightsSHA256 || a.WeightsSHA256 == "" {
		return fmt.Sprintf("weights: reference %q, resumed %q", a.WeightsSHA256, b.WeightsSHA256)
	}
	return ""
}

// KillAndResume runs the config in dir, SIGKILLs it o.Kills times (crash
// points and timers drawn from o.Seed; timers scaled by typical, the
// uninterrupted run's wall time), resuming after each kill, then runs it
// to completion. It returns how each kill was delivered.
func (o Options) KillAndResume(ctx context.Context, dir string, typical time.Duration) ([]string, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	var kills []string
	refDur, killed := typical, dir
	r := rand.New(rand.NewPCG(o.Seed, 0x6c6f6e67))
	// Kill until o.Kills kills have landed. Each resumed process has less
	// left to do, so the moments are drawn early in what remains: crash
	// points at their first few hits, timers in the first part of the
	// reference's wall time.
	for i := 0; len(kills) < o.Kills; i++ {
		var how string
		var p *proc
		if i%2 == 0 {
			pt := Points[(i/2)%len(Points)]
			spec := fmt.Sprintf("%s:%d", pt, 1+r.IntN(2))
			how = "crash point " + spec
			p = o.start(ctx, killed, spec)
		} else {
			d := time.Duration(float64(refDur) * (0.02 + 0.15*r.Float64()))
			how = "timer " + d.Round(time.Millisecond).String()
			p = o.start(ctx, killed, "")
			p.killAfter(d)
		}
		st, err := p.wait()
		switch {
		case err != nil:
			return kills, fmt.Errorf("crashtest: run %d (%s): %w", i+1, how, err)
		case st == "killed":
			fmt.Fprintf(o.Log, "kill %d: %s\n", len(kills)+1, how)
			kills = append(kills, how)
		default:
			return kills, fmt.Errorf("crashtest: the run finished after %d of %d kills: make it longer (run.max_steps)", len(kills), o.Kills)
		}
	}
	if _, err := o.start(ctx, killed, "").wait(); err != nil {
		return kills, fmt.Errorf("crashtest: final resume: %w", err)
	}
	return kills, nil
}
