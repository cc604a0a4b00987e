package controller

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
)

// The controller's decisions, driven by data-driven scripts in
// testdata/plan: each block is a command, a line "----", and the expected
// output, ended by a blank line. The scripts apply the events the
// decisions return to a run state (as the log would), so every decision is
// seen as a fold of what came before. `go test ./controller -run
// TestPlanScripts -rewrite` rewrites the expected outputs.
//
// Commands (one handler each): config KEY=VALUE...; plan step=N (one
// generation round); ready [now=SECONDS] [served=V] [training]
// [computing=N] [committing=N] [snapshotting] (the whole planner: a
// Ready, performed and advanced; its attempts go in flight);
// checkpoint step=N; admit step=N; start; finish-call r=G/M [n=K];
// seal r=G/M; fail-call r=G/M class=infra|data [diverged];
// timeout r=G/M [cause=call|rollout]; drop g=G; retry g=G; commit g=G;
// train step=N; seal-all step=N; crash; resume; stabilize step=N; epoch;
// stale step=N lag=L; snapshot-written; trainer-lost; restored step=N.
// seal, fail-call, timeout, seal-all and stabilize end the attempts they
// touch; crash is a new process (the state refolded from the events, a
// fresh planner, nothing in flight). G is a group's index in admission
// order.

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/plan expected outputs")

func TestPlanScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/plan/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

type cmd struct {
	comment    string // the comment lines before it, kept by -rewrite
	line, want string
}

func parseScript(t *testing.T, path string) []cmd {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []cmd
	var comment strings.Builder
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") {
			comment.WriteString(l + "\n")
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c := cmd{comment: comment.String(), line: l}
		comment.Reset()
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q without a ---- line", path, i+1, l)
		}
		i += 2
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		c.want = strings.Join(want, "\n")
		out = append(out, c)
	}
	return out
}

func runScript(t *testing.T, path string) {
	cmds := parseScript(t, path)
	sc := newScenario(t)
	var outb strings.Builder
	for _, c := range cmds {
		got := strings.TrimRight(sc.do(c.line), "\n")
		if !*rewrite && got != c.want {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", path, c.line, got, c.want)
		}
		fmt.Fprintf(&outb, "%s%s\n----\n%s\n\n", c.comment, c.line, got)
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(outb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scenario is a run state and the events that folded it.
type scenario struct {
	t      *testing.T
	cfg    *config.Config
	cc     *Config // cfg mapped (config.Controller), after every config command
	pl     planner // the ready command's planner: its clock memory lasts the script
	order  *data.Order
	st     *runlog.State
	events []runlog.Event
	// What the effect loop would report: attempts in flight, deadlines
	// that ended attempts since the last ready, a trainer that lost its
	// state.
	flight   map[runlog.RolloutID]uint32
	timeouts map[runlog.RolloutID]Timeout
	lost     error
}

func newScenario(t *testing.T) *scenario {
	cfg := testConfig(t, "data.num_prompts=4", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
		"rollout_failure.max_infra_attempts=2", "rollout_failure.max_data_attempts=2", "rollout_failure.max_group_retries=1")
	ds := data.NewGenerated(cfg.Data.NumPrompts, func(i int) (data.Prompt, error) {
		return data.Prompt{ID: fmt.Sprint("p", i), Task: []byte(`{}`)}, nil
	})
	sc := &scenario{t: t, cfg: cfg, cc: ctl(t, cfg), st: runlog.NewState(),
		flight: map[runlog.RolloutID]uint32{}, timeouts: map[runlog.RolloutID]Timeout{}}
	sc.pl.start(t0)
	sc.reorder(ds)
	sc.apply(runlog.RunStarted{Seed: cfg.Run.Seed, Mode: "deterministic"})
	return sc
}

func (sc *scenario) reorder(ds data.Dataset) {
	o, err := data.NewOrder(ds, sc.cfg.Run.Seed, sc.cfg.Data.Shuffle)
	if err != nil {
		sc.t.Fatal(err)
	}
	sc.order = o
}

func (sc *scenario) apply(evs ...runlog.Event) error {
	for _, ev := range evs {
		if err := runlog.Apply(sc.st, ev); err != nil {
			return err
		}
		sc.events = append(sc.events, ev)
	}
	return nil
}

// name prints a group as g<admission index>.
func (sc *scenario) name(id runlog.GroupID) string {
	if g := sc.st.Groups[id]; g != nil {
		return fmt.Sprint("g", g.Seq)
	}
	return id.String()
}

func (sc *scenario) rname(id runlog.RolloutID) string {
	return fmt.Sprintf("%s/%d", sc.name(id.Group), id.Member)
}

func (sc *scenario) show(ev runlog.Event) string {
	switch e := ev.(type) {
	case runlog.PromptAdmitted:
		rep := ""
		if e.Replaces != 0 {
			rep = " replaces=" + sc.name(e.Replaces)
		}
		return fmt.Sprintf("PromptAdmitted %s epoch=%d cursor=%d prompt=%s step=%d%s", sc.name(e.Group), e.Epoch, e.Cursor, e.PromptID, e.Step, rep)
	case runlog.AttemptStarted:
		return fmt.Sprintf("AttemptStarted %s attempt=%d version=%d restart=%t", sc.rname(e.Rollout), e.Attempt, e.Version, e.Restart)
	case runlog.CallFinished:
		return fmt.Sprintf("CallFinished %s attempt=%d call=%d version=%d", sc.rname(e.Rollout), e.Attempt, e.Call, e.Version)
	case runlog.RolloutSealed:
		return fmt.Sprintf("RolloutSealed %s attempt=%d", sc.rname(e.Rollout), e.Attempt)
	case runlog.RolloutFailed:
		cause := ""
		switch e.Cause {
		case runlog.CauseOther:
		case runlog.CauseCallTimeout, runlog.CauseRolloutTimeout:
			cause = fmt.Sprintf(" cause=%s reason=%q", e.Cause, e.Reason)
		default:
			cause = " cause=" + e.Cause.String()
		}
		return fmt.Sprintf("RolloutFailed %s attempt=%d class=%s%s", sc.rname(e.Rollout), e.Attempt, e.Class, cause)
	case runlog.Rewound:
		return fmt.Sprintf("Rewound step=%d", e.Step)
	case runlog.GroupCommitted:
		return "GroupCommitted " + sc.name(e.Group)
	case runlog.GroupDropped:
		return fmt.Sprintf("GroupDropped %s class=%s", sc.name(e.Group), e.Class)
	case runlog.GroupRequeued:
		return fmt.Sprintf("GroupRequeued %s step=%d class=%s", sc.name(e.Group), e.Step, e.Class)
	case runlog.RolloutRegenerated:
		return "RolloutRegenerated " + sc.rname(e.Rollout)
	case runlog.CheckpointDurable:
		return fmt.Sprintf("CheckpointDurable step=%d", e.Step)
	case runlog.StepTrained:
		var gs []string
		for _, g := range e.Groups {
			gs = append(gs, sc.name(g))
		}
		return fmt.Sprintf("StepTrained step=%d version=%d groups=%s", e.Step, e.Version, strings.Join(gs, ","))
	}
	return fmt.Sprintf("%T", ev)
}

func (sc *scenario) showPlan(id runlog.RolloutID) string {
	r := sc.st.Rollout(id)
	p := nextAttempt(r, sc.cc.RolloutFailure, sc.cfg.Run.Seed)
	what := "resume"
	switch {
	case p.done:
		what = "done"
	case p.exhausted:
		what = "exhausted"
	case p.start && p.restart:
		what = "new attempt, restart"
	case p.start:
		what = "new attempt"
	}
	return fmt.Sprintf("%s: %s (status %v, infra %d/%d, data %d/%d, backoff %t)", sc.rname(id), what, r.Status,
		r.InfraFailures, sc.cc.RolloutFailure.MaxInfraAttempts, r.DataFailures, sc.cc.RolloutFailure.MaxDataAttempts, p.backoff > 0)
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (sc *scenario) group(s string) *runlog.Group {
	i, err := strconv.Atoi(strings.TrimPrefix(s, "g"))
	if err != nil || i >= len(sc.st.Order) {
		sc.t.Fatalf("no group %q", s)
	}
	return sc.st.Groups[sc.st.Order[i]]
}

func (sc *scenario) rollout(s string) *runlog.Rollout {
	g, m, _ := strings.Cut(s, "/")
	i, err := strconv.Atoi(m)
	if err != nil {
		sc.t.Fatalf("bad rollout %q", s)
	}
	return sc.group(g).Members[i]
}

// emit applies events and prints them, or the error Apply returned.
func (sc *scenario) emit(b *strings.Builder, evs ...runlog.Event) {
	for _, ev := range evs {
		if err := sc.apply(ev); err != nil {
			fmt.Fprintf(b, "error: %v\n", err)
			return
		}
		fmt.Fprintln(b, sc.show(ev))
	}
}

func (sc *scenario) do(line string) string {
	fields := strings.Fields(line)
	a := args(fields[1:])
	var b strings.Builder
	switch fields[0] {
	case "config":
		if err := sc.cfg.ApplyOverrides(fields[1:]); err != nil {
			return "error: " + err.Error()
		}
		sc.cc = ctl(sc.t, sc.cfg)
		return "ok"
	case "admit":
		step, _ := strconv.ParseInt(a["step"], 10, 64)
		evs, err := admissions(sc.st, step, sc.cc, sc.order)
		if err != nil {
			return "error: " + err.Error()
		}
		if len(evs) == 0 {
			return "nothing to admit"
		}
		sc.emit(&b, evs...)
	case "plan":
		// One round of the planner, performed the way the effect loop does:
		// Append first, then the groups to launch.
		step, _ := strconv.ParseInt(a["step"], 10, 64)
		app, launch, err := genRound(sc.st, step, sc.cc, sc.order, nil)
		if err != nil {
			return "error: " + err.Error()
		}
		sc.emit(&b, app...)
		fmt.Fprintf(&b, "launch: [%s]", sc.names(launch))
	case "ready":
		return sc.ready(a)
	case "snapshot-written":
		// The snapshot effect's own record, as Log.Snapshot appends it.
		sc.emit(&b, runlog.SnapshotWritten{Offset: sc.st.Applied, Path: "snap"})
	case "checkpoint":
		step, _ := strconv.ParseInt(a["step"], 10, 64)
		sc.emit(&b, runlog.CheckpointDurable{Step: step, Version: step, Path: fmt.Sprint("checkpoints/", step)})
	case "start":
		n := 0
		for _, id := range sc.st.Order {
			g := sc.st.Groups[id]
			if g.Status != runlog.GroupStatusOpen {
				continue
			}
			for _, m := range g.Members {
				if p := nextAttempt(m, sc.cc.RolloutFailure, sc.cfg.Run.Seed); p.start {
					sc.emit(&b, runlog.AttemptStarted{Rollout: m.ID, Attempt: m.Attempt + 1, Version: sc.st.Version, Restart: p.restart})
					n++
				}
			}
		}
		if n == 0 {
			return "nothing to start"
		}
	case "finish-call":
		r := sc.rollout(a["r"])
		n := 1
		if a["n"] != "" {
			n, _ = strconv.Atoi(a["n"])
		}
		for range n {
			sc.emit(&b, runlog.CallFinished{Rollout: r.ID, Attempt: r.Attempt, Call: uint32(len(r.Calls)), PromptPrefix: r.CtxLen,
				PromptSuffix: []int32{1}, Sampled: []int32{2}, Logprobs: []float32{-1}, Finish: runlog.FinishStop, Version: sc.st.Version, Selected: true})
		}
	case "seal":
		r := sc.rollout(a["r"])
		delete(sc.flight, r.ID)
		sc.emit(&b, runlog.RolloutSealed{Rollout: r.ID, Attempt: r.Attempt, Outcome: runlog.OutcomeCompleted, Reward: 1})
	case "fail-call":
		r := sc.rollout(a["r"])
		delete(sc.flight, r.ID)
		ev := runlog.RolloutFailed{Rollout: r.ID, Attempt: r.Attempt, Class: a["class"], Reason: "injected"}
		if _, ok := a["diverged"]; ok {
			// What rollout.Run records for rollout.ErrDiverged.
			ev.Reason, ev.Cause = "data failure: resume: "+rollout.ErrDiverged.Error(), runlog.CauseDiverged
		}
		sc.emit(&b, ev)
		fmt.Fprintln(&b, sc.showPlan(r.ID))
	case "timeout":
		return sc.timeout(a)
	case "trainer-lost":
		// An effect found the trainer back at step 0 (train.ErrStateLost).
		sc.lost = errLost
		return "the trainer lost its state"
	case "restored":
		// The recovery effect: the newest durable checkpoint (step N) is
		// loaded into the trainer and the log rewound to it.
		step, _ := strconv.ParseInt(a["step"], 10, 64)
		sc.lost = nil
		if sc.st.Step > step {
			sc.emit(&b, runlog.Rewound{Step: step, Version: step})
		}
		fmt.Fprintf(&b, "the trainer is at step %d", step)
	case "drop", "retry", "commit":
		g := sc.group(a["g"])
		ev := groupOutcome(g, sc.cc.RolloutFailure)
		want := map[string]string{"drop": "runlog.GroupDropped", "retry": "runlog.GroupRequeued", "commit": "runlog.GroupCommitted"}[fields[0]]
		if got := fmt.Sprintf("%T", ev); got != want {
			fmt.Fprintf(&b, "decision is %s, not %s\n", got, want)
			if ev == nil {
				break
			}
		}
		sc.emit(&b, ev)
	case "train":
		step, _ := strconv.ParseInt(a["step"], 10, 64)
		var ids []runlog.GroupID
		for _, id := range sc.st.Order {
			if g := sc.st.Groups[id]; g.ForStep == step && g.Status == runlog.GroupStatusCommitted {
				ids = append(ids, id)
			}
		}
		sc.emit(&b, runlog.StepTrained{Step: step, Groups: ids, Version: step})
	case "crash":
		// A new process: only the log survives, folded again from its events.
		before := sc.st.Digest()
		st := runlog.NewState()
		for _, ev := range sc.events {
			if err := runlog.Apply(st, ev); err != nil {
				return "error: " + err.Error()
			}
		}
		sc.st = st
		sc.pl = planner{}
		sc.flight, sc.timeouts, sc.lost = map[runlog.RolloutID]uint32{}, map[runlog.RolloutID]Timeout{}, nil
		fmt.Fprintf(&b, "refolded %d events; same state: %t", len(sc.events), st.Digest() == before)
	case "resume":
		for _, id := range sc.st.Order {
			g := sc.st.Groups[id]
			if g.Status != runlog.GroupStatusOpen {
				continue
			}
			for _, m := range g.Members {
				if m.Status != runlog.StatusSealed {
					fmt.Fprintln(&b, sc.showPlan(m.ID))
				}
			}
		}
		if b.Len() == 0 {
			return "nothing to resume"
		}
	case "seal-all":
		sc.sealAll(&b, a)
	case "stabilize":
		sc.stabilize(&b, a)
	case "epoch":
		cur := sc.order.Normalize(data.Cursor{Epoch: sc.st.Epoch, Pos: sc.st.NextCursor})
		fmt.Fprintf(&b, "cursor epoch %d pos %d; %d prompts left under run.max_epochs=%d", cur.Epoch, cur.Pos,
			min(sc.order.Left(cur, sc.cfg.Run.MaxEpochs), 1<<40), sc.cfg.Run.MaxEpochs)
	case "stale":
		step, _ := strconv.ParseInt(a["step"], 10, 64)
		lag, _ := strconv.ParseInt(a["lag"], 10, 64)
		for _, id := range sc.st.Order {
			for _, r := range staleMembers(sc.st.Groups[id], step, lag) {
				sc.emit(&b, runlog.RolloutRegenerated{Rollout: r, Reason: "stale"})
			}
		}
		if b.Len() == 0 {
			return "nothing stale"
		}
	default:
		sc.t.Fatalf("unknown command %q", fields[0])
	}
	return b.String()
}

// TestReadyTakenTwicePanics: a second Ready before Advance would plan from
// a state that does not hold the first one's events.
func TestReadyTakenTwicePanics(t *testing.T) {
	sc := newScenario(t)
	var p planner
	in := Input{Now: t0}
	if _, err := p.Take(sc.st, sc.cc, sc.order, in); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("taking a Ready twice without Advance did not panic")
			}
		}()
		p.Take(sc.st, sc.cc, sc.order, in)
	}()
	p.Advance()
	if _, err := p.Take(sc.st, sc.cc, sc.order, in); err != nil {
		t.Fatal(err)
	}
}

// sealAll: every member of the step's open groups starts an attempt if it
// has none, makes one call and seals; the outcomes are left to the
// planner (ready).
func (sc *scenario) sealAll(b *strings.Builder, a map[string]string) {
	step, _ := strconv.ParseInt(a["step"], 10, 64)
	for _, id := range sc.st.Order {
		g := sc.st.Groups[id]
		if g.Status != runlog.GroupStatusOpen || g.ForStep != step {
			continue
		}
		for _, m := range g.Members {
			if p := nextAttempt(m, sc.cc.RolloutFailure, sc.cc.Run.Seed); p.start {
				sc.emit(b, runlog.AttemptStarted{Rollout: m.ID, Attempt: m.Attempt + 1, Version: sc.st.Version, Restart: p.restart})
			}
			if m.Status == runlog.StatusRunning {
				b.WriteString(sc.do(fmt.Sprintf("finish-call r=%s", sc.rname(m.ID))))
				sc.emit(b, runlog.RolloutSealed{Rollout: m.ID, Attempt: m.Attempt, Outcome: runlog.OutcomeCompleted, Reward: 1})
				delete(sc.flight, m.ID)
			}
		}
	}
}

// stabilize runs every open group of the step to an outcome: attempts
// start, running members make one call and seal, outcomes are logged.
func (sc *scenario) stabilize(b *strings.Builder, a map[string]string) {
	step, _ := strconv.ParseInt(a["step"], 10, 64)
	for round := 0; round < 10; round++ {
		progressed := false
		for _, id := range sc.st.Order {
			g := sc.st.Groups[id]
			if g.Status != runlog.GroupStatusOpen || g.ForStep != step {
				continue
			}
			for _, m := range g.Members {
				p := nextAttempt(m, sc.cc.RolloutFailure, sc.cfg.Run.Seed)
				switch {
				case p.start:
					sc.emit(b, runlog.AttemptStarted{Rollout: m.ID, Attempt: m.Attempt + 1, Version: sc.st.Version, Restart: p.restart})
					progressed = true
				case !p.done && !p.exhausted:
					b.WriteString(sc.do(fmt.Sprintf("finish-call r=%s", sc.rname(m.ID))))
					sc.emit(b, runlog.RolloutSealed{Rollout: m.ID, Attempt: m.Attempt, Outcome: runlog.OutcomeCompleted, Reward: 1})
					delete(sc.flight, m.ID)
					progressed = true
				}
			}
			if ev := groupOutcome(g, sc.cc.RolloutFailure); ev != nil {
				sc.emit(b, ev)
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
}

// TestPlanIsPure: plan gives the same Ready for the same inputs and
// memory, and leaves that memory as it was (the planner copies what it
// changes): here a held attempt that is due, planned twice from the same
// memory, starts both times.
func TestPlanIsPure(t *testing.T) {
	sc := newScenario(t)
	for _, line := range []string{"config rollout_failure.backoff_base_s=1 rollout_failure.backoff_cap_s=1",
		"ready now=0", "fail-call r=g0/0 class=infra", "ready now=1"} {
		sc.do(line)
	}
	if len(sc.pl.mem.held) != 1 {
		t.Fatalf("held %v, want g0/0's next attempt", sc.pl.mem.held)
	}
	in := Input{Now: t0.Add(5 * time.Second), Attempts: sc.flight}
	first, err := plan(sc.st, sc.cc, sc.order, in, sc.pl.mem)
	if err != nil {
		t.Fatal(err)
	}
	second, err := plan(sc.st, sc.cc, sc.order, in, sc.pl.mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Attempts) != 1 || !first.Attempts[0].New {
		t.Fatalf("first plan: attempts %+v, want g0/0's next", first.Attempts)
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("the same inputs gave two Readies:\n%+v\n%+v", first, second)
	}
}
