package metrics

import (
	"reflect"
	"strings"
)

// Sink receives each step's row (metrics.jsonl, TensorBoard, Prometheus).
type Sink interface {
	Write(Step) error
}

// Sinks writes to every sink in order, stopping at the first error.
type Sinks []Sink

// Write implements Sink.
func (ss Sinks) Write(s Step) error {
	for _, x := range ss {
		if err := x.Write(s); err != nil {
			return err
		}
	}
	return nil
}

// Named is one numeric field of a Step under its section/name tag.
type Named struct {
	Tag   string
	Value float64
}

// section groups fields into TensorBoard panels by their JSON name.
func section(name string) string {
	switch {
	case strings.HasPrefix(name, "prompt_len") || strings.HasPrefix(name, "completion_len") || strings.HasPrefix(name, "rollout_len"):
		return "lengths"
	case strings.HasPrefix(name, "ratio_") || strings.HasPrefix(name, "kl_") || strings.HasPrefix(name, "staleness") ||
		name == "entropy" || name == "logprob_abs_diff":
		return "policy"
	case strings.Contains(name, "segment") || strings.Contains(name, "compact"):
		return "compaction"
	case strings.HasPrefix(name, "clip") || name == "loss" || name == "grad_norm" || name == "lr" ||
		name == "rows" || name == "train_tokens" || name == "padding_tokens":
		return "train"
	case strings.HasSuffix(name, "_s") || strings.HasSuffix(name, "tokens") || name == "calls":
		return "perf"
	}
	return "rollout"
}

var stepFields = func() []struct {
	idx int
	tag string
} {
	var out []struct {
		idx int
		tag string
	}
	t := reflect.TypeFor[Step]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "step" || name == "version" || name == "" {
			continue
		}
		out = append(out, struct {
			idx int
			tag string
		}{i, section(name) + "/" + name})
	}
	return out
}()

// Scalars lists every numeric field of s (all but step and version) as
// section/json_name, in field order.
func Scalars(s Step) []Named {
	v := reflect.ValueOf(s)
	out := make([]Named, 0, len(stepFields))
	for _, f := range stepFields {
		x := v.Field(f.idx)
		var val float64
		switch x.Kind() {
		case reflect.Float64:
			val = x.Float()
		case reflect.Int, reflect.Int64:
			val = float64(x.Int())
		default:
			continue
		}
		out = append(out, Named{f.tag, val})
	}
	return out
}
