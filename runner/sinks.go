package runner

import (
	"context"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/metrics/tb"
	"github.com/longhaul-rl/longhaul/train"
)

// TBDir is the TensorBoard directory inside a run directory.
const TBDir = "tb"

// tbSink writes each step's row as TensorBoard scalars.
type tbSink struct{ w *tb.Writer }

func (s tbSink) Write(st metrics.Step) error {
	named := metrics.Scalars(st)
	vals := make([]tb.Scalar, len(named))
	for i, n := range named {
		vals[i] = tb.Scalar{Tag: n.Tag, Value: float32(n.Value)}
	}
	return s.w.Write(st.Step, vals)
}

// timedTrainer reports how long each checkpoint write takes.
type timedTrainer struct {
	train.Trainer
	observe func(time.Duration)
}

func (t timedTrainer) SaveCheckpoint(ctx context.Context, dir string) error {
	t0 := time.Now()
	err := t.Trainer.SaveCheckpoint(ctx, dir)
	if err == nil {
		t.observe(time.Since(t0))
	}
	return err
}

// timedGen reports each call of an in-process generator, as the openai
// client does per server.
type timedGen struct {
	gen.Generator
	server  string
	observe func(string, time.Duration, error)
}

func (g timedGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	t0 := time.Now()
	res, err := g.Generator.Generate(ctx, reqs)
	g.observe(g.server, time.Since(t0), err)
	return res, err
}

// Lanes and GenerateOn pass the inner generator's lanes through (gen.Laned).
func (g timedGen) Lanes() int {
	if l, ok := g.Generator.(gen.Laned); ok {
		return l.Lanes()
	}
	return 1
}

func (g timedGen) GenerateOn(ctx context.Context, lane int, reqs []gen.Request) ([]gen.Result, error) {
	l, ok := g.Generator.(gen.Laned)
	if !ok {
		return g.Generate(ctx, reqs)
	}
	t0 := time.Now()
	res, err := l.GenerateOn(ctx, lane, reqs)
	g.observe(g.server, time.Since(t0), err)
	return res, err
}
