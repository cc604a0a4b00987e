package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/examples"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

func TestParseDemosErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"task": {"id": "a"}, "calls": ["1"]}` + "\n" + `{"task": {}, "calls": ["1"], "extra": 1}`, "demos.jsonl:2: bad demonstration"},
		{`{"task": {"id": "a"}, "calls": []}`, "demos.jsonl:1: demonstration has no \"calls\""},
		{"\n\n{not json", "demos.jsonl:3: bad demonstration"},
		{"", "demos.jsonl: no demonstrations"},
	} {
		_, err := ParseDemos("demos.jsonl", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	d, err := ParseDemos("demos.jsonl", strings.NewReader(`{"task": {"id": "a", "params": {"pages": [1]}}, "calls": ["read 1", "answer 3"]}`+"\n"))
	if err != nil || len(d) != 1 || d[0].Task.ID != "a" || len(d[0].Calls) != 2 || d[0].line != 1 {
		t.Fatalf("%+v %v", d, err)
	}
}

// TestDemosTrainSummaries checks that the warm start's rows train the
// summary calls' tokens whatever grpo.summary_credit says: with masked,
// summaries are out of RL's loss, not out of the warm start (a policy
// never taught to summarize would write nothing to train or mask).
func TestDemosTrainSummaries(t *testing.T) {
	for _, credit := range []string{"rollout", "masked"} {
		cfg, err := config.Parse("recall.yaml", examples.Recall)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.ApplyOverrides([]string{"grpo.summary_credit=" + credit}); err != nil {
			t.Fatal(err)
		}
		rows, err := Demos(context.Background(), cfg, env.Builtin(), 12)
		if err != nil {
			t.Fatal(err)
		}
		trained := 0
		for _, r := range rows {
			// A summary row's sampled tokens follow the request
			// "summarize<|end|><|assistant|>": count trained tokens there.
			text := bytetok.Decode(r.Tokens)
			if !strings.Contains(text, "summarize<|end|><|assistant|>") {
				continue
			}
			for i := len(r.Tokens) - 1; i >= 0 && r.Tokens[i] != bytetok.Assistant; i-- {
				if r.Mask[i] == 1 {
					trained++
				}
			}
		}
		if trained == 0 {
			t.Fatalf("summary_credit %s: no summary token is trained in the warm start's rows", credit)
		}
	}
}
