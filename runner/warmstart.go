package runner

import (
	"context"
	"fmt"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
	"github.com/longhaul-rl/longhaul/train"
)

// oracles are the scripted agents that write warm-start demonstrations:
// each answers the conversation so far (the summary request, when the
// compaction policy asks for summaries, is given).
var oracles = map[string]func(summaryRequest string) textOracle{
	"ledger": func(s string) textOracle {
		return func(msgs []lhtok.Message) (string, error) { return env.LedgerOracle(msgs, s) }
	},
	"guess": func(string) textOracle { return env.GuessOracle },
}

// textOracle answers a conversation with the text of the next assistant
// turn.
type textOracle func(msgs []lhtok.Message) (string, error)

// demoChat is the chat a warm start's rollouts render through: nil for the
// byte template, else the run's Chat (tokenizer.*), so the demonstrations
// are in the tokens and template RL samples.
type demoChat struct {
	chat   lhtok.Chat
	parser toolcall.Parser
}

// oracleGen is oracle as a generator speaking ch's tokens.
func oracleGen(ch *demoChat, oracle textOracle) gen.Generator {
	if ch == nil {
		return &scripted.Func{Reply: func(req gen.Request) (string, error) { return oracle(scripted.Messages(req.Prompt)) }}
	}
	return &chatOracle{tok: ch.chat.Tokenizer(), reply: oracle}
}

// segConfig is the warm start's segment config (DemoSegmentConfig) with ch's tokenizer (nil ch: the
// default chat's) for its break diagnostics.
func (ch *demoChat) segConfig(cfg *config.Config) segment.Config {
	sc := cfg.DemoSegmentConfig()
	if ch != nil {
		sc.Tokenizer = ch.chat.Tokenizer()
	} else {
		sc.Tokenizer = rollout.DefaultChat.Tokenizer()
	}
	return sc
}

// spec is the warm start's rollout spec: the run's, through ch's chat.
func (ch *demoChat) spec(sp rollout.Spec, cfg *config.Config) rollout.Spec {
	if ch != nil {
		sp.Chat, sp.ToolParser = ch.chat, ch.parser
		sp.History = bridge.History(cfg.Tokenizer.History)
		sp.Render.Kwargs = cfg.Tokenizer.TemplateKwargs
	}
	return sp
}

// Demos returns n supervised rows: oracle episodes of the configured
// environment, played through the same rollout loop, compaction and
// segment builder as RL, so the warm start teaches exactly the token
// layout RL trains on. Tasks are drawn from their own seed stream, apart
// from the RL dataset.
func Demos(ctx context.Context, cfg *config.Config, reg *env.Registry, n int) ([]train.Row, error) {
	return demos(ctx, cfg, reg, n, nil)
}

func demos(ctx context.Context, cfg *config.Config, reg *env.Registry, n int, ch *demoChat) ([]train.Row, error) {
	// The warm start's episodes are not the run's: their environment keys
	// get a run id of their own.
	ctx = env.WithRun(ctx, env.RunOf(ctx)+"-warmstart")
	if cfg.Warmstart.Data != "" {
		return fileDemos(ctx, cfg, reg, n, ch)
	}
	params, err := cfg.EnvParamsJSON()
	if err != nil {
		return nil, err
	}
	ccfg, err := cfg.Controller()
	if err != nil {
		return nil, err
	}
	cc := cfg.CompactionConfig()
	policy, err := cc.New()
	if err != nil {
		return nil, err
	}
	summary := ""
	if s, ok := policy.(compaction.Summarizer); ok {
		summary = s.SummaryRequest()
	}
	var reply textOracle
	if mk, ok := oracles[cfg.Env.Name]; ok {
		reply = mk(summary)
	} else if def, err := env.Builtin().Lookup(cfg.Env.Name); err == nil && def.Oracle != nil {
		if reply, err = def.Oracle(params, summary); err != nil {
			return nil, fmt.Errorf("warmstart: env.params: %w", err)
		}
	} else {
		return nil, fmt.Errorf("warmstart: environment %q has no demonstration oracle; set warmstart.data to a demonstrations file or warmstart.enabled: false", cfg.Env.Name)
	}
	oracle := oracleGen(ch, reply)
	seed := rng.Derive(cfg.Run.Seed, "warmstart")
	var rows []train.Row
	for i := 0; len(rows) < n; i++ {
		task, err := reg.Task(cfg.Env.Name, params, seed, i)
		if err != nil {
			return nil, err
		}
		rec := &scripted.Recorder{}
		id := runlog.RolloutID{Group: runlog.GroupID(i)}
		spec := ch.spec(controller.RolloutSpec(&ccfg, reg, task, id, 1, rng.Derive(seed, "env", uint64(i)), oracle, rec), cfg)
		if _, err := rollout.Run(ctx, spec, nil); err != nil {
			return nil, fmt.Errorf("warmstart: demonstration %d: %w", i, err)
		}
		calls, bounds := rollout.Trace(rec.Events(), id)
		segs, _, err := segment.Build(calls, bounds, ch.segConfig(cfg))
		if err != nil {
			return nil, fmt.Errorf("warmstart: demonstration %d: %w", i, err)
		}
		for j := range segs {
			rows = append(rows, segs[j].Row(1))
		}
	}
	return rows[:n], nil
}
