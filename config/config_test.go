package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/examples"
)

var update = flag.Bool("update", false, "rewrite docs/config.md")

const docPath = "../docs/config.md"

func TestDocsUpToDate(t *testing.T) {
	want := Markdown()
	if *update {
		if err := os.WriteFile(docPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go run ./config/gendoc (or go test ./config -update)", docPath)
	}
}

func TestEveryKeyDocumented(t *testing.T) {
	root := reflect.ValueOf(Default()).Elem()
	for _, sec := range fieldsOf(root, "") {
		if sec.doc == "" {
			t.Errorf("section %s has no doc tag", sec.path)
		}
		for _, f := range leaves(sec.value, sec.path) {
			if f.doc == "" {
				t.Errorf("%s has no doc tag", f.path)
			}
		}
	}
}

func TestDefaultValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Apply(Default(), nil); err != nil {
		t.Fatal(err)
	}
}

func TestExampleMatchesDefault(t *testing.T) {
	c, err := Parse(examples.DefaultName, examples.Default)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(Default(), c); len(d) != 0 {
		t.Fatalf("examples/ledger.yaml differs from Default() in %v", d)
	}
	if Digest(c) != Digest(Default()) {
		t.Fatal("digest differs with no diff")
	}
	// Every key is spelled out, so a new key cannot be forgotten there.
	for _, f := range leaves(reflect.ValueOf(c).Elem(), "") {
		sec, key, _ := strings.Cut(f.path, ".")
		if !bytes.Contains(examples.Default, []byte("\n"+sec+":\n")) || !bytes.Contains(examples.Default, []byte(" "+key+":")) {
			t.Errorf("examples/ledger.yaml does not spell out %s", f.path)
		}
	}
}

func TestNoCompactionExample(t *testing.T) {
	c, err := Load("../examples/ledger-nocompaction.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := Diff(Default(), c); !slices.Equal(d, []string{"compaction.enabled"}) {
		t.Fatalf("diff = %v, want only compaction.enabled", d)
	}
}

func TestLoadEmpty(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "---\n"} {
		c, err := Parse("x.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if d := Diff(Default(), c); len(d) != 0 {
			t.Fatalf("%q: diff %v", src, d)
		}
	}
	c, err := Load("")
	if err != nil || len(Diff(Default(), c)) != 0 {
		t.Fatalf("Load(\"\") = %v, %v", c, err)
	}
	if _, err := Load("does/not/exist.yaml"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // each must appear in the error text
	}{
		{"misspelled", "run:\n  seed: 3\ngrpo:\n  num_generation_per_prompt: 4\n",
			[]string{`f.yaml:4: unknown key "grpo.num_generation_per_prompt" (did you mean "num_generations_per_prompt"?)`}},
		{"section", "grop:\n  estimator: rloo\n",
			[]string{`f.yaml:1: unknown key "grop" (did you mean "grpo"?)`}},
		{"far", "run:\n  zzzzzzzzzzzz: 1\n", []string{`f.yaml:2: unknown key "run.zzzzzzzzzzzz"`}},
		{"all reported", "run:\n  sed: 1\n  mod: x\n",
			[]string{`f.yaml:2: unknown key "run.sed"`, `f.yaml:3: unknown key "run.mod"`}},
		{"int", "run:\n  max_steps: ten\n", []string{`f.yaml:2: run.max_steps: want an integer, got str "ten"`}},
		{"quoted int", "run:\n  max_steps: \"10\"\n", []string{`f.yaml:2: run.max_steps: want an integer`}},
		{"float for int", "run:\n  max_steps: 1.5\n", []string{`run.max_steps: want an integer, got float "1.5"`}},
		{"negative seed", "run:\n  seed: -1\n", []string{`run.seed: want a non-negative integer`}},
		{"bool", "data:\n  shuffle: maybe\n", []string{`f.yaml:2: data.shuffle: want true or false`}},
		{"null", "run:\n  max_steps:\n", []string{`run.max_steps: want an integer, got no value`}},
		{"nan", "optim:\n  lr: .nan\n", []string{`optim.lr: want a finite number`}},
		{"list", "generator:\n  urls: http://x\n", []string{`f.yaml:2: generator.urls: want a list of strings`}},
		{"list elem", "compaction:\n  trigger_range: [1, x]\n", []string{`compaction.trigger_range: want an integer, got str "x"`}},
		{"section scalar", "run: 3\n", []string{`f.yaml:1: run: want a mapping of keys`}},
		{"root scalar", "hello\n", []string{`f.yaml:1: (root): want a mapping of keys`}},
		{"duplicate", "run:\n  seed: 1\n  seed: 2\n", []string{`f.yaml:3: run.seed: duplicate key (first at line 2)`}},
		{"params scalar", "env:\n  params: 3\n", []string{`env.params: want a mapping`}},
		{"two docs", "run: {}\n---\nrun: {}\n", []string{`one YAML document`}},
		{"syntax", "run:\n  seed: [1\n", []string{`f.yaml: yaml:`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.src))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestUnknownKeyIsKeyError(t *testing.T) {
	_, err := Parse("f.yaml", []byte("grpo:\n  num_generation_per_prompt: 4\n"))
	if !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("errors.Is(ErrUnknownKey) false for %v", err)
	}
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != "grpo.num_generation_per_prompt" || ke.Line != 2 || ke.File != "f.yaml" {
		t.Fatalf("KeyError = %+v", ke)
	}
}

func TestParseValues(t *testing.T) {
	src := `
run: {seed: 7, mode: throughput}
data: {}
env:
  params:
    width: 3
    nested: {a: [1, 2]}
optim:
  lr: 2e-3
  beta1: 0          # an integer is a number
generator:
  kind: openai
  urls: [http://a:8000/v1, "https://b/v1"]
  model: qwen
compaction:
  trigger_range: [40, 60]
`
	c, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.Run.Seed != 7 || c.Run.Mode != "throughput" || c.Run.MaxSteps != 200 {
		t.Errorf("run = %+v", c.Run)
	}
	if c.Optim.LR != 2e-3 || c.Optim.Beta1 != 0 {
		t.Errorf("optim = %+v", c.Optim)
	}
	if !slices.Equal(c.Generator.URLs, []string{"http://a:8000/v1", "https://b/v1"}) {
		t.Errorf("urls = %v", c.Generator.URLs)
	}
	if c.Env.Params["width"] != 3 || c.Env.Name != "ledger" {
		t.Errorf("env = %+v", c.Env)
	}
	want := []string{"compaction.trigger_range", "env.params.nested", "env.params.width",
		"generator.kind", "generator.model", "generator.urls", "optim.beta1", "optim.lr", "run.mode", "run.seed"}
	if d := Diff(Default(), c); !slices.Equal(d, want) {
		t.Errorf("diff = %v\nwant %v", d, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestOverrides(t *testing.T) {
	c := Default()
	err := c.ApplyOverrides([]string{
		"grpo.num_generations_per_prompt=4",
		"run.mode=throughput",
		"run.seed=42",
		"optim.lr=5e-4",
		"data.shuffle=false",
		"generator.urls=http://a/v1, http://b/v1",
		"compaction.trigger_range=[40, 60]",
		"env.params.width=3",
		"env.params.reward.scale=0.5",
		"model.weights=",
		"checkpointing.dir=a=b", // only the first '=' splits
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPO.NumGenerationsPerPrompt != 4 || c.Run.Mode != "throughput" || c.Run.Seed != 42 ||
		c.Optim.LR != 5e-4 || c.Data.Shuffle || c.Checkpointing.Dir != "a=b" {
		t.Errorf("scalars not applied: %+v", c)
	}
	if !slices.Equal(c.Generator.URLs, []string{"http://a/v1", "http://b/v1"}) {
		t.Errorf("urls = %q", c.Generator.URLs)
	}
	if !slices.Equal(c.Compaction.TriggerRange, []int{40, 60}) {
		t.Errorf("trigger_range = %v", c.Compaction.TriggerRange)
	}
	if c.Env.Params["width"] != 3 || c.Env.Params["reward"].(map[string]any)["scale"] != 0.5 {
		t.Errorf("params = %v", c.Env.Params)
	}
	// The same change by file and by override gives the same digest.
	f, err := Parse("f.yaml", []byte("env:\n  params:\n    width: 3\n    reward: {scale: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ApplyOverrides([]string{"grpo.num_generations_per_prompt=4", "run.mode=throughput",
		"run.seed=42", "optim.lr=0.0005", "data.shuffle=false", "generator.urls=[http://a/v1, http://b/v1]",
		"compaction.trigger_range=40,60", "checkpointing.dir=a=b"}); err != nil {
		t.Fatal(err)
	}
	if Digest(f) != Digest(c) {
		t.Errorf("file+override digest differs: %v", Diff(f, c))
	}
}

func TestOverrideErrors(t *testing.T) {
	err := Default().ApplyOverrides([]string{
		"grpo.num_generations_per_prompt=eight",
		"grpo.num_generation_per_prompt=8",
		"run.seed=-3",
		"optim.lr=inf",
		"data.shuffle=yes please",
		"grpo=3",
		"env.params=3",
		"novalue",
		"compaction.trigger_range=[1, x]",
	})
	want := []string{
		`grpo.num_generations_per_prompt: want an integer, got "eight"`,
		`unknown key "grpo.num_generation_per_prompt" (did you mean "grpo.num_generations_per_prompt"?)`,
		`run.seed: want a non-negative integer, got "-3"`,
		`optim.lr: want a finite number, got "inf"`,
		`data.shuffle: want true or false`,
		`grpo: is a section`,
		`env.params: is a mapping`,
		`novalue: want an override of the form key=value`,
		`compaction.trigger_range: want an integer, got "x"`,
	}
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\nwant it to contain %q", err, w)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		overrides []string
		want      []string
	}{
		{[]string{"grpo.num_generations_per_prompt=1"}, []string{"grpo.num_generations_per_prompt: must be ≥ 2, got 1"}},
		{[]string{"run.mode=fast"}, []string{`run.mode: must be one of deterministic, throughput, got "fast"`}},
		{[]string{"data.source=jsonl"}, []string{"data.path: must be set when data.source is jsonl"}},
		{[]string{"generator.kind=openai"}, []string{"generator.urls: must list at least one server"}},
		{[]string{"generator.urls=localhost:8000"}, []string{`generator.urls: want an http(s) URL, got "localhost:8000"`}},
		{[]string{"generator.reload_method=reload weights"}, []string{`generator.reload_method: must be a Python method name (letters, digits, _), got "reload weights"`}},
		{[]string{"generator.reload_method="}, []string{`generator.reload_method: must be a Python method name`}},
		{[]string{"trainer.kind=remote"}, []string{"trainer.url: must be set"}},
		{[]string{"model.heads=5"}, []string{"model.heads: must divide model.dim (128), got 5"}},
		{[]string{"model.heads=128"}, []string{"model.dim: rope needs an even head width"}},
		{[]string{"compaction.trigger_tokens=64"}, []string{"compaction.trigger_tokens: must be < rollout.context_budget (64), got 64"}},
		{[]string{"rollout.context_budget=200"}, []string{"rollout.context_budget: must be ≤ model.context (128), got 200"}},
		{[]string{"compaction.trigger_range=[70, 40]"}, []string{"compaction.trigger_range: must be [0, 0] or 1 ≤ lo ≤ hi"}},
		{[]string{"compaction.trigger_range=1"}, []string{"compaction.trigger_range: must be [0, 0] or [lo, hi], got [1]"}},
		{[]string{"rollout_failure.min_step_batch_fraction=1.5"}, []string{"rollout_failure.min_step_batch_fraction: must be in [0, 1], got 1.5"}},
		{[]string{"optim.beta2=1"}, []string{"optim.beta2: must be in [0, 1), got 1"}},
		{[]string{"optim.min_lr=0.1"}, []string{"optim.min_lr: must be ≤ optim.lr"}},
		{[]string{"sampling.top_p=0"}, []string{"sampling.top_p: must be in (0, 1], got 0"}},
		{[]string{"rollout_failure.backoff_cap_s=0.1"}, []string{"rollout_failure.backoff_cap_s: must be ≥ rollout_failure.backoff_base_s"}},
		{[]string{"grpo.microbatch_tokens=64"}, []string{"grpo.microbatch_tokens: must hold one full row"}},
		{[]string{"checkpointing.keep_top_k=2", "checkpointing.metric="}, []string{"checkpointing.metric: must not be empty"}},
		// The cosine decays over the steps after the warm-up: none is an
		// error naming both keys, before anything runs (not the trainer's
		// "cosine schedule needs TotalSteps > WarmupSteps" at step 1).
		{[]string{"run.max_steps=5", "optim.warmup_steps=5"}, []string{"run.max_steps: must be > optim.warmup_steps (5) when optim.schedule is cosine"}},
		{[]string{"run.max_steps=2", "optim.warmup_steps=5"}, []string{"run.max_steps: must be > optim.warmup_steps (5)", "got 2"}},
		{[]string{"run.max_steps=2", "optim.warmup_steps=5", "optim.schedule=constant"}, nil},
		{[]string{"run.max_steps=6", "optim.warmup_steps=5"}, nil},
		// All errors come back at once.
		{[]string{"run.max_steps=0", "optim.lr=0", "loss.norm=sum"}, []string{
			"run.max_steps: must be ≥ 1, got 0", "optim.lr: must be > 0, got 0", `loss.norm: must be one of token_mean, seq_mean, got "sum"`}},
		// Rules that only bind when their feature is on.
		{[]string{"compaction.enabled=false", "compaction.trigger_tokens=500", "compaction.trigger_range=[200, 300]",
			"warmstart.enabled=false", "warmstart.steps=0", "checkpointing.enabled=false", "checkpointing.save_period=0"}, nil},
	}
	for _, tc := range cases {
		c := Default()
		if err := c.ApplyOverrides(tc.overrides); err != nil {
			t.Fatalf("%v: %v", tc.overrides, err)
		}
		err := c.Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%v: unexpected %v", tc.overrides, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%v: no error", tc.overrides)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q\nwant it to contain %q", tc.overrides, err, w)
			}
		}
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key == "" {
			t.Errorf("%v: not a KeyError: %v", tc.overrides, err)
		}
	}
}

func TestParamsMustBeJSON(t *testing.T) {
	c, err := Parse("f.yaml", []byte("env:\n  params:\n    ok: 1\n    bad: {1: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "env.params: must have string keys") {
		t.Fatalf("validate: %v", err)
	}
}

func TestDigestAndDiff(t *testing.T) {
	a := Default()
	b := a.Clone()
	if Digest(a) != Digest(b) || len(Diff(a, b)) != 0 {
		t.Fatal("clone differs")
	}
	if err := b.ApplyOverrides([]string{"generator.api_key=secret"}); err != nil {
		t.Fatal(err)
	}
	if Digest(a) != Digest(b) || len(Diff(a, b)) != 0 {
		t.Fatal("api_key must not change the digest")
	}
	if err := b.ApplyOverrides([]string{"run.max_steps=201", "env.params.x=1"}); err != nil {
		t.Fatal(err)
	}
	if Digest(a) == Digest(b) {
		t.Fatal("digest did not change")
	}
	if d := Diff(a, b); !slices.Equal(d, []string{"env.params.x", "run.max_steps"}) {
		t.Fatalf("diff = %v", d)
	}
	if d := Diff(b, a); !slices.Equal(d, []string{"env.params.x", "run.max_steps"}) {
		t.Fatalf("reverse diff = %v", d)
	}
	if a.Run.MaxSteps != 200 || len(a.Env.Params) != 0 {
		t.Fatal("overrides on a clone changed the original")
	}
	// Nil and empty lists are the same config.
	b = Default()
	b.Generator.URLs = nil
	if Digest(b) != Digest(Default()) {
		t.Fatal("nil vs empty urls changed the digest")
	}
	// The canonical form is sorted JSON.
	can, err := Canonical(Default())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(can, []byte(`{"checkpointing.dir":"checkpoints",`)) {
		t.Fatalf("canonical = %s", can[:60])
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default()
	if err := c.ApplyOverrides([]string{"env.params.width=3", "run.seed=9", "generator.urls=http://a/v1"}); err != nil {
		t.Fatal(err)
	}
	y, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("marshalled", y)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if d := Diff(c, back); len(d) != 0 {
		t.Fatalf("round trip differs in %v", d)
	}
}

func TestSuggest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"num_generation_per_prompt", "num_generations_per_prompt"},
		{"estimater", "estimator"},
		{"qqqqqqqq", ""},
	} {
		if got := suggest(tc.in, names(reflect.ValueOf(GRPO{}))); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCheckChange(t *testing.T) {
	old := Default()
	cur := Default()
	if err := cur.ApplyOverrides([]string{"run.max_steps=100", "optim.lr=5e-4", "env.params.x=1", "run.seed=2"}); err != nil {
		t.Fatal(err)
	}
	if err := CheckChange(old, old.Clone(), nil); err != nil {
		t.Fatal(err)
	}
	if err := CheckChange(old, cur, []string{"run.max_steps", "optim", "env.params", "run.seed"}); err != nil {
		t.Fatal(err)
	}
	err := CheckChange(old, cur, []string{"run.max_steps", "env"})
	if !errors.Is(err, ErrConfigChanged) || !strings.Contains(err.Error(), "optim.lr, run.seed (") {
		t.Fatalf("err = %v", err)
	}
	// "run.max" must not allow "run.max_steps": prefixes stop at a dot.
	if err := CheckChange(old, cur, []string{"run.max", "optim", "env", "run.seed"}); err == nil {
		t.Fatal("partial-name prefix allowed a key")
	}
}

// TestKLCoefRefused: a KL penalty has no reference policy to take logprobs
// from, so the key is refused at load, naming it, not at step 1.
func TestKLCoefRefused(t *testing.T) {
	c := Default()
	c.Loss.KLCoef = 0.1
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "loss.kl_coef") {
		t.Fatalf("err = %v, want an error naming loss.kl_coef", err)
	}
}
