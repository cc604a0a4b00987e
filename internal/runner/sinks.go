package runner

import (
	"github.com/longhaul-rl/longhaul/internal/metrics"
	"github.com/longhaul-rl/longhaul/internal/tb"
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
