package chat

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/race"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestReferenceCorpus renders the chats of the independent corpus
// (test/tokenizers/corpus.py: tools, tool calls and results, system
// prompts, reasoning_content present, empty, null or missing, unknown
// roles, adversarial text) through the Go rendering and the engine alone,
// and compares each with Python Jinja2's render (byte for byte, or both
// raise) and the ids with transformers.js's encoding of it. Python is the
// reference for template semantics; @huggingface/jinja's render must equal
// it on every chat not marked py_only (the generator keeps the inputs
// where the JavaScript reference departs from Python to those), so on
// those Go equals both.
func TestReferenceCorpus(t *testing.T) {
	if race.Enabled {
		t.Skip("compares the real tokenizers over a corpus, for tens of seconds under -race: run without it (.ci/steps/13-tokenizers.sh does)")
	}
	items, refs := tokref.Corpus(t)
	type model struct {
		native, engine Chat
		tmpl           *Template
	}
	models := map[string]*model{}
	load := func(name string) *model {
		if m := models[name]; m != nil {
			return m
		}
		dir := tokref.ModelDir(t, name)
		tok, err := hf.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := hf.LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := Compile(name, cfg.ChatTemplate, cfg.BOS, cfg.EOS)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{native: Chat{Template: tmpl, Tok: tok}, engine: Chat{Template: tmpl.EngineOnly(), Tok: tok}, tmpl: tmpl}
		models[name] = m
		return m
	}
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		if bad <= 6 {
			t.Errorf(format, args...)
		}
	}
	type count struct{ chats, raised, pyOnly, jsDiffers int }
	counts := map[string]*count{}
	for _, it := range items {
		if it.Kind != "chat" {
			continue
		}
		m := load(it.Model)
		c := counts[it.Model]
		if c == nil {
			c = &count{}
			counts[it.Model] = c
		}
		c.chats++
		ref := refs[it.ID]
		var ws []WireMessage
		if err := json.Unmarshal(it.Messages, &ws); err != nil {
			t.Fatalf("%s: %v", it.ID, err)
		}
		msgs, err := m.tmpl.FromWire(ws)
		if err != nil {
			t.Fatalf("%s: %v", it.ID, err)
		}
		opt := tokenizer.RenderOptions{Tools: it.Tools, AddGenerationPrompt: it.AddGenerationPrompt, Kwargs: it.Kwargs}
		if it.PyOnly {
			c.pyOnly++
		}
		jsSame := (ref.Text == nil) == (ref.JSText == nil) && (ref.Text == nil || *ref.Text == *ref.JSText)
		if !jsSame {
			c.jsDiffers++
			if !it.PyOnly {
				fail("%s: the two references disagree on a chat not marked py_only (Python %q, JavaScript %q %s): the generator must keep such inputs to py_only chats",
					it.ID, deref(ref.Text), deref(ref.JSText), ref.JSError)
			}
		}
		if ref.Text == nil {
			c.raised++
		}
		for _, path := range []struct {
			name string
			c    Chat
		}{{"go", m.native}, {"engine", m.engine}} {
			got, err := path.c.Template.Render(msgs, opt)
			switch {
			case ref.Text == nil && err == nil:
				fail("%s (%s): Python raised %s; Go rendered %q", it.ID, path.name, ref.Error, got)
				continue
			case ref.Text == nil:
				continue
			case err != nil:
				fail("%s (%s): %v", it.ID, path.name, err)
				continue
			case got != *ref.Text:
				p := 0
				for p < len(got) && p < len(*ref.Text) && got[p] == (*ref.Text)[p] {
					p++
				}
				want := *ref.Text
				fail("%s (%s): differs from Python at byte %d:\n got %q\nwant %q", it.ID, path.name, p,
					got[max(0, p-60):min(len(got), p+60)], want[max(0, p-60):min(len(want), p+60)])
				continue
			}
			ids, err := path.c.RenderTokens(context.Background(), msgs, opt)
			if err != nil || !slices.Equal(ids, ref.IDs) {
				p := 0
				for p < len(ids) && p < len(ref.IDs) && ids[p] == ref.IDs[p] {
					p++
				}
				fail("%s (%s): ids differ from transformers.js's at %d (err %v):\n got %v\nwant %v", it.ID, path.name, p, err,
					ids[max(0, p-8):min(len(ids), p+8)], ref.IDs[max(0, p-8):min(len(ref.IDs), p+8)])
			}
		}
	}
	if len(counts) == 0 {
		t.Fatal("the corpus has no chats")
	}
	if bad > 0 {
		t.Fatalf("%d renders differ", bad)
	}
	for name, c := range counts {
		t.Logf("%s: %d chats identical to Python Jinja2 and transformers.js's ids, both paths (%d raised in both); %d py_only, of which @huggingface/jinja renders %d otherwise",
			name, c.chats, c.raised, c.pyOnly, c.jsDiffers)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<raised>"
	}
	return *s
}
