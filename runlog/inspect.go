package runlog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/longhaul-rl/longhaul/store"
)

// Report summarises a run directory for `longhaul inspect`. The JSON names
// are read by other tools: keep them.
type Report struct {
	Dir            string            `json:"dir"`
	LastOffset     Offset            `json:"last_offset"` // offset of the last event
	Events         uint64            `json:"events"`
	Counts         map[string]uint64 `json:"counts"`   // events by kind
	Groups         map[string]int    `json:"groups"`   // groups by status
	Rollouts       map[string]int    `json:"rollouts"` // rollouts by status
	Epoch          uint32            `json:"epoch"`
	NextCursor     uint64            `json:"next_cursor"`
	Step           int64             `json:"step"`
	Version        int64             `json:"version"`
	Trained        []TrainedReport   `json:"trained"`
	CallsGenerated uint64            `json:"calls_generated"`
	Dropped        int               `json:"dropped"` // groups dropped after a member used up its attempts
	WeightsSHA256  string            `json:"weights_sha256"`
	LastSnapshot   *SnapshotWritten  `json:"last_snapshot"`
	LastCheckpoint *CheckpointReport `json:"last_checkpoint"`
	// Tail is set when the last chunk ends in an unfinished or torn
	// append (a writer may be mid-append); inspect never repairs it.
	Tail *Recovery `json:"tail,omitempty"`
	// ConfigChanges lists every resume that changed allowed config keys.
	ConfigChanges []ConfigChangeReport `json:"config_changes,omitempty"`
	// Damage lists damaged bytes in the log: each LogDamaged the run
	// logged, and damage this read passed over that none logged yet.
	Damage []DamageReport `json:"damage,omitempty"`
	// FromSnapshot is set when damage kept inspect from folding the log
	// whole: the state is that of the snapshot at this offset, plus the
	// records after it (config changes before it may be missing).
	FromSnapshot uint64 `json:"from_snapshot,omitempty"`
}

// DamageReport is one damaged place in the log.
type DamageReport struct {
	File   string `json:"file"`
	Offset uint64 `json:"offset"`
	Reason string `json:"reason"`
	Logged bool   `json:"logged"` // a LogDamaged event holds it
}

// ConfigChangeReport is one ConfigChanged.
type ConfigChangeReport struct {
	Offset  Offset   `json:"offset"`
	Step    int64    `json:"step"` // the step the run had reached
	Digest  string   `json:"digest"`
	Changes []string `json:"changes"`
}

// TrainedReport is one StepTrained.
type TrainedReport struct {
	Step      int64    `json:"step"`
	Version   int64    `json:"version"`
	PromptIDs []string `json:"prompt_ids"`
	GroupIDs  []string `json:"group_ids"`
}

// CheckpointReport is one CheckpointDurable.
type CheckpointReport struct {
	Step           int64  `json:"step"`
	Version        int64  `json:"version"`
	Path           string `json:"path"`
	ManifestDigest string `json:"manifest_digest"`
}

// weightsFile is where the trainer publishes the current weights.
const weightsFile = "weights/model.safetensors"

// Inspect builds the report of the run directory dir. It only reads.
func Inspect(ctx context.Context, dir string) (*Report, error) {
	var changes []ConfigChangeReport
	var step int64
	f, err := readOnlyFold(ctx, dir, func(off Offset, ev Event) error {
		switch v := ev.(type) {
		case StepTrained:
			step = v.Step
		case Rewound:
			step = v.Step
		case ConfigChanged:
			changes = append(changes, ConfigChangeReport{Offset: off, Step: step, Digest: hex.EncodeToString(v.Digest[:]), Changes: v.Changes})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s, tail, end := f.s, f.tail, f.end
	r := &Report{Dir: dir, LastOffset: end, FromSnapshot: f.from, Damage: damageReports(s.Damage, f.passed), Events: s.Applied, Counts: map[string]uint64{}, Groups: map[string]int{}, Rollouts: map[string]int{},
		Epoch: s.Epoch, NextCursor: s.NextCursor, Step: s.Step, Version: s.Version, Trained: []TrainedReport{},
		CallsGenerated: s.Counts[KindCallFinished], Tail: tail, ConfigChanges: changes}
	for k := 1; k < numKinds; k++ {
		r.Counts[Kind(k).String()] = s.Counts[k]
	}
	for _, id := range s.Order {
		g := s.Groups[id]
		r.Groups[g.Status.String()]++
		if g.Status == GroupStatusDropped {
			r.Dropped++
		}
		for _, m := range g.Members {
			r.Rollouts[m.Status.String()]++
		}
	}
	for _, t := range s.Trained {
		tr := TrainedReport{Step: t.Step, Version: t.Version, PromptIDs: []string{}, GroupIDs: []string{}}
		for _, g := range t.Groups {
			tr.GroupIDs = append(tr.GroupIDs, g.String())
			tr.PromptIDs = append(tr.PromptIDs, s.Groups[g].PromptID)
		}
		r.Trained = append(r.Trained, tr)
	}
	if s.LastSnapshot.Path != "" {
		ls := s.LastSnapshot
		r.LastSnapshot = &ls
	}
	if n := len(s.Checkpoints); n > 0 {
		c := s.Checkpoints[n-1]
		r.LastCheckpoint = &CheckpointReport{Step: c.Step, Version: c.Version, Path: c.Path, ManifestDigest: hex.EncodeToString(c.ManifestDigest[:])}
	}
	sum, err := fileSHA256(filepath.Join(dir, weightsFile))
	if err != nil {
		return nil, err
	}
	r.WeightsSHA256 = sum
	return r, nil
}

// damageReports merges the damage the log holds with what a read passed
// over.
func damageReports(logged, passed []LogDamaged) []DamageReport {
	var out []DamageReport
	for _, d := range logged {
		out = append(out, DamageReport{File: d.File, Offset: d.Offset, Reason: d.Reason, Logged: true})
	}
	for _, p := range passed {
		if !slices.ContainsFunc(logged, func(d LogDamaged) bool { return d.File == p.File && d.Offset == p.Offset }) {
			out = append(out, DamageReport{File: p.File, Offset: p.Offset, Reason: p.Reason})
		}
	}
	return out
}

// fileSHA256 returns the hex SHA-256 of a file, or "" if it does not exist.
func fileSHA256(path string) (string, error) {
	// Raw, as all of inspect: it reads a local run directory in place.
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("hash weights: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash weights: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WriteText renders the report for people.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", r.Dir)
	fmt.Fprintf(tw, "events\t%d (last at offset %d)\n", r.Events, r.LastOffset)
	fmt.Fprintf(tw, "step\t%d (version %d)\n", r.Step, r.Version)
	fmt.Fprintf(tw, "cursor\tepoch %d, next %d\n", r.Epoch, r.NextCursor)
	fmt.Fprintf(tw, "calls generated\t%d\n", r.CallsGenerated)
	if r.WeightsSHA256 != "" {
		fmt.Fprintf(tw, "weights sha256\t%s\n", r.WeightsSHA256)
	}
	if r.LastSnapshot != nil {
		fmt.Fprintf(tw, "last snapshot\toffset %d, %s\n", r.LastSnapshot.Offset, r.LastSnapshot.Path)
	} else {
		fmt.Fprintf(tw, "last snapshot\tnone\n")
	}
	if c := r.LastCheckpoint; c != nil {
		fmt.Fprintf(tw, "last checkpoint\tstep %d, version %d, %s\n", c.Step, c.Version, c.Path)
	} else {
		fmt.Fprintf(tw, "last checkpoint\tnone\n")
	}
	if r.Tail != nil {
		fmt.Fprintf(tw, "tail\t%d bytes in %d records after offset %d not whole (%s)\n", r.Tail.Bytes, r.Tail.Records, r.Tail.Offset, r.Tail.Message)
	}
	for _, c := range r.ConfigChanges {
		fmt.Fprintf(tw, "config changed\tat step %d (offset %d): %s\n", c.Step, c.Offset, strings.Join(c.Changes, "; "))
	}
	for _, d := range r.Damage {
		how := "logged by the run"
		if !d.Logged {
			how = "found by this inspect, not logged yet"
		}
		fmt.Fprintf(tw, "DAMAGE\t%s at offset %d (%s): %s\n", d.File, d.Offset, how, d.Reason)
	}
	if r.FromSnapshot > 0 {
		fmt.Fprintf(tw, "state\tfrom the snapshot at offset %d and the records after it (damage before it)\n", r.FromSnapshot)
	}
	fmt.Fprintln(tw, "\nevents by kind")
	for k := 1; k < numKinds; k++ {
		fmt.Fprintf(tw, "  %s\t%d\n", Kind(k), r.Counts[Kind(k).String()])
	}
	fmt.Fprintln(tw, "\ngroups")
	for _, st := range []GroupStatus{GroupStatusOpen, GroupStatusCommitted, GroupStatusTrained, GroupStatusDropped} {
		fmt.Fprintf(tw, "  %s\t%d\n", st, r.Groups[st.String()])
	}
	fmt.Fprintln(tw, "\nrollouts")
	for _, st := range []RolloutStatus{StatusPending, StatusRunning, StatusFailed, StatusSealed} {
		fmt.Fprintf(tw, "  %s\t%d\n", st, r.Rollouts[st.String()])
	}
	return tw.Flush()
}

// RolloutReport is one rollout in full, for `inspect RUN_DIR rollout ID`.
type RolloutReport struct {
	ID          string             `json:"id"`
	PromptID    string             `json:"prompt_id"`
	Status      string             `json:"status"`
	Outcome     string             `json:"outcome,omitempty"`
	Reward      float64            `json:"reward"`
	Success     bool               `json:"success"`
	Attempts    []AttemptReport    `json:"attempts"`
	Calls       []CallReport       `json:"calls"`
	EnvSteps    []EnvStepReport    `json:"env_steps"`
	Compactions []CompactionReport `json:"compactions"`
	Failures    []FailureReport    `json:"failures"`
	// ConfigDigest names the run's config (runner.RunTokenizer reads the
	// tokenizer the calls' text is decoded with from it).
	ConfigDigest [32]byte `json:"-"`
}

// Decoder turns token ids into text: the run's tokenizer
// (tokenizer.Tokenizer).
type Decoder interface {
	Decode(ids []int32) string
}

// Decode fills the calls' text from their token ids with the run's
// tokenizer; until then a report carries the ids only.
func (r *RolloutReport) Decode(d Decoder) {
	for i := range r.Calls {
		c := &r.Calls[i]
		c.Prompt, c.PromptSuffix, c.Sampled = d.Decode(c.prompt), d.Decode(c.suffix), d.Decode(c.sampled)
	}
}

// AttemptReport is one AttemptStarted.
type AttemptReport struct {
	Attempt uint32 `json:"attempt"`
	Seed    uint64 `json:"seed"`
	Version int64  `json:"version"`
	Restart bool   `json:"restart"` // the episode started over (its environment could not be brought back)
}

// CallReport is one call with its decoded tokens.
type CallReport struct {
	Call         uint32 `json:"call"`
	Attempt      uint32 `json:"attempt"`
	Version      int64  `json:"version"`
	Segment      uint32 `json:"segment"`
	Finish       string `json:"finish"`
	Selected     bool   `json:"selected"`
	Reject       string `json:"reject,omitempty"`
	PromptPrefix uint32 `json:"prompt_prefix"`
	PromptTokens int    `json:"prompt_tokens"`
	Prompt       string `json:"prompt"`        // the full prompt, decoded
	PromptSuffix string `json:"prompt_suffix"` // the new part of the prompt, decoded
	Sampled      string `json:"sampled"`
	SampledCount int    `json:"sampled_tokens"`

	prompt, suffix, sampled []int32 // what Decode turns into text
}

// EnvStepReport is one EnvStep.
type EnvStepReport struct {
	Attempt     uint32  `json:"attempt"`
	Turn        uint32  `json:"turn"`
	Action      string  `json:"action"`
	Observation string  `json:"observation"`
	Reward      float64 `json:"reward"`
	Done        bool    `json:"done"`
}

// CompactionReport is one Compaction.
type CompactionReport struct {
	Attempt      uint32 `json:"attempt"`
	Boundary     uint32 `json:"boundary"`
	AfterCall    uint32 `json:"after_call"`
	Policy       string `json:"policy"`
	TokensBefore uint32 `json:"tokens_before"`
	TokensAfter  uint32 `json:"tokens_after"`
	Kept         int    `json:"kept"`
	Dropped      int    `json:"dropped"`
	Replaced     int    `json:"replaced"`
	Summarized   int    `json:"summarized"`
}

// FailureReport is one RolloutFailed.
type FailureReport struct {
	Attempt uint32 `json:"attempt"`
	Class   string `json:"class"`
	Reason  string `json:"reason"`
}

// InspectRollout reports one rollout of the run directory dir; its calls'
// text is filled by Decode with the run's tokenizer.
func InspectRollout(ctx context.Context, dir string, id RolloutID) (*RolloutReport, error) {
	var evs []Event
	f, err := readOnlyFold(ctx, dir, func(_ Offset, ev Event) error {
		if rid, ok := eventRollout(ev); ok && rid == id {
			evs = append(evs, ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := f.whole(id, len(evs)); err != nil {
		return nil, err
	}
	s := f.s
	r, err := s.rollout(id)
	if err != nil {
		return nil, fmt.Errorf("inspect rollout: %w", err)
	}
	br := &blobReader{fs: store.OS, dir: filepath.Join(dir, logSubdir)}
	defer br.close()
	for i, ev := range evs {
		if evs[i], err = materialize(br, ev); err != nil {
			return nil, err
		}
	}
	rep := &RolloutReport{ID: id.String(), PromptID: s.Groups[id.Group].PromptID, Status: r.Status.String(), Outcome: r.Outcome, Reward: r.Reward, Success: r.Success,
		Attempts: []AttemptReport{}, Calls: []CallReport{}, EnvSteps: []EnvStepReport{}, Compactions: []CompactionReport{}, Failures: []FailureReport{},
		ConfigDigest: s.ConfigDigest}
	_, prompts := Contexts(evs)
	nc := 0
	for _, ev := range evs {
		switch v := ev.(type) {
		case AttemptStarted:
			rep.Attempts = append(rep.Attempts, AttemptReport{Attempt: v.Attempt, Seed: v.Seed, Version: v.Version, Restart: v.Restart})
		case CallFinished:
			seg := uint32(0)
			if int(v.Call) < len(r.Calls) {
				seg = r.Calls[v.Call].Segment
			}
			rep.Calls = append(rep.Calls, CallReport{Call: v.Call, Attempt: v.Attempt, Version: v.Version, Segment: seg, Finish: v.Finish, Selected: v.Selected, Reject: v.Reject,
				PromptPrefix: v.PromptPrefix, PromptTokens: len(prompts[nc]), SampledCount: len(v.Sampled),
				prompt: prompts[nc], suffix: v.PromptSuffix, sampled: v.Sampled})
			nc++
		case EnvStep:
			rep.EnvSteps = append(rep.EnvSteps, EnvStepReport{Attempt: v.Attempt, Turn: v.Turn, Action: v.Action, Observation: v.Observation, Reward: v.Reward, Done: v.Done})
		case Compaction:
			c := CompactionReport{Attempt: v.Attempt, Boundary: v.Boundary, AfterCall: v.AfterCall, Policy: v.Policy, TokensBefore: v.TokensBefore, TokensAfter: v.TokensAfter}
			for _, l := range v.Lineage {
				switch l.Op {
				case OpKept:
					c.Kept++
				case OpDropped:
					c.Dropped++
				case OpReplaced:
					c.Replaced++
				case OpSummarized:
					c.Summarized++
				}
			}
			rep.Compactions = append(rep.Compactions, c)
		case RolloutFailed:
			rep.Failures = append(rep.Failures, FailureReport{Attempt: v.Attempt, Class: v.Class, Reason: v.Reason})
		}
	}
	return rep, nil
}

// eventRollout returns the rollout an event belongs to.
func eventRollout(ev Event) (RolloutID, bool) {
	switch v := ev.(type) {
	case AttemptStarted:
		return v.Rollout, true
	case CallFinished:
		return v.Rollout, true
	case *callRecord:
		return v.Rollout, true
	case EnvStep:
		return v.Rollout, true
	case Compaction:
		return v.Rollout, true
	case RolloutSealed:
		return v.Rollout, true
	case RolloutFailed:
		return v.Rollout, true
	}
	return RolloutID{}, false
}

// WriteText renders the rollout for people.
func (r *RolloutReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "rollout %s (prompt %q): %s", r.ID, r.PromptID, r.Status)
	if r.Status == StatusSealed.String() {
		fmt.Fprintf(w, ", %s, reward %g, success %v", r.Outcome, r.Reward, r.Success)
	}
	fmt.Fprintln(w)
	for _, a := range r.Attempts {
		restart := ""
		if a.Restart {
			restart = ", restarted from scratch"
		}
		fmt.Fprintf(w, "attempt %d: seed %d, version %d%s\n", a.Attempt, a.Seed, a.Version, restart)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "failure: attempt %d, %s: %s\n", f.Attempt, f.Class, f.Reason)
	}
	comps := slices.Clone(r.Compactions)
	steps := slices.Clone(r.EnvSteps)
	for _, c := range r.Calls {
		fmt.Fprintf(w, "\ncall %d (attempt %d, version %d, segment %d, finish %s, selected %v", c.Call, c.Attempt, c.Version, c.Segment, c.Finish, c.Selected)
		if c.Reject != "" {
			fmt.Fprintf(w, ", rejected: %s", c.Reject)
		}
		fmt.Fprintf(w, ")\n  prompt: %d tokens, %d kept from the context\n  new:    %q\n  sample: %q\n", c.PromptTokens, c.PromptPrefix, c.PromptSuffix, c.Sampled)
		for len(comps) > 0 && comps[0].AfterCall == c.Call {
			k := comps[0]
			fmt.Fprintf(w, "compaction %d by %s: %d -> %d tokens (kept %d, dropped %d, replaced %d, summarized %d)\n",
				k.Boundary, k.Policy, k.TokensBefore, k.TokensAfter, k.Kept, k.Dropped, k.Replaced, k.Summarized)
			comps = comps[1:]
		}
	}
	if len(steps) > 0 {
		fmt.Fprintln(w, "\nenv steps")
		for _, s := range steps {
			fmt.Fprintf(w, "  attempt %d turn %d: action %q -> %q, reward %g, done %v\n", s.Attempt, s.Turn, s.Action, s.Observation, s.Reward, s.Done)
		}
	}
	return nil
}
