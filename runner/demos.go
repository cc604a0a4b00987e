package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// Demo is one line of a warmstart.data file: a task, and the text of
// every model call of the demonstrated episode in order (summaries
// included, when the compaction policy asks for them). The episode is
// played against the configured environment through the rollout loop, so
// the warm start trains the token layout RL samples.
type Demo struct {
	Task  env.Task `json:"task"`
	Calls []string `json:"calls"`
	line  int
}

// ReadDemos reads a demonstrations file; errors name the file and line.
func ReadDemos(path string) ([]Demo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("warmstart.data: %w", err)
	}
	defer f.Close()
	return ParseDemos(path, f)
}

// ParseDemos reads demonstrations from r; name is used in errors.
func ParseDemos(name string, r io.Reader) ([]Demo, error) {
	var out []Demo
	br := bufio.NewReader(r)
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: read: %w", name, line, err)
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			var d Demo
			dec := json.NewDecoder(bytes.NewReader(t))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); err != nil {
				return nil, fmt.Errorf("%s:%d: bad demonstration: %w", name, line, err)
			}
			if len(d.Calls) == 0 {
				return nil, fmt.Errorf("%s:%d: demonstration has no \"calls\"", name, line)
			}
			d.line = line
			out = append(out, d)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no demonstrations", name)
	}
	return out, nil
}

// fileDemos plays every demonstration of warmstart.data once and returns
// n rows, cycling through the episodes' rows in file order.
func fileDemos(ctx context.Context, cfg *config.Config, reg *env.Registry, n int, ch *demoChat) ([]train.Row, error) {
	demos, err := ReadDemos(cfg.Warmstart.Data)
	if err != nil {
		return nil, err
	}
	ccfg, err := cfg.Controller()
	if err != nil {
		return nil, err
	}
	seed := rng.Derive(cfg.Run.Seed, "warmstart")
	var rows []train.Row
	for i, d := range demos {
		where := fmt.Sprintf("%s:%d", cfg.Warmstart.Data, d.line)
		if d.Task.Env == "" {
			d.Task.Env = cfg.Env.Name
		}
		if d.Task.ID == "" {
			d.Task.ID = fmt.Sprintf("demo-%d", d.line)
		}
		calls := d.Calls
		script := oracleGen(ch, func([]lhtok.Message) (string, error) {
			if len(calls) == 0 {
				return "", failure.NewData("demo", fmt.Errorf("%s: the episode asks for more model calls than the %d given", where, len(d.Calls)))
			}
			c := calls[0]
			calls = calls[1:]
			return c, nil
		})
		rec := &scripted.Recorder{}
		id := runlog.RolloutID{Group: runlog.GroupID(i)}
		spec := ch.spec(controller.RolloutSpec(&ccfg, reg, d.Task, id, 1, rng.Derive(seed, "env", uint64(i)), script, rec), cfg)
		res, err := rollout.Run(ctx, spec, nil)
		if err != nil {
			return nil, fmt.Errorf("warmstart: demonstration %s: %w", where, err)
		}
		if len(calls) > 0 {
			return nil, fmt.Errorf("warmstart: demonstration %s: the episode ended (%s) with %d of its %d calls unused", where, res.Outcome, len(calls), len(d.Calls))
		}
		trace, bounds := rollout.Trace(rec.Events(), id)
		segs, _, err := segment.Build(trace, bounds, ch.segConfig(cfg))
		if err != nil {
			return nil, fmt.Errorf("warmstart: demonstration %s: %w", where, err)
		}
		for j := range segs {
			rows = append(rows, segs[j].Row(1))
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("warmstart: %s: the demonstrations made no training rows", cfg.Warmstart.Data)
	}
	out := make([]train.Row, n)
	for i := range out {
		out[i] = rows[i%len(rows)]
	}
	return out, nil
}
