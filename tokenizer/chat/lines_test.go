package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// TestTemplateErrorsNameLine: a syntax error and a raise_exception while
// rendering both name the template file and the line; a raise_exception
// written in template text or inside a string literal stays as written.
func TestTemplateErrorsNameLine(t *testing.T) {
	const file = "/models/x/tokenizer_config.json"
	_, err := Compile(file, "{{ bos_token }}\n{%- for m in messages %}\n{{ m.content }}\n{{ m.content + }}\n{% endfor %}", "", "")
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("syntax error: %v", err)
	}
	src := "{# raise_exception('in a comment') #}raise_exception('in text')\n" +
		"{%- for m in messages %}\n" +
		"{{- '[' + m.role + \" raise_exception('in a string')\" + ']' }}\n" +
		"{%- if m.role == 'tool' %}\n" +
		"{{- raise_exception('Tools are not supported: ' + m.name) }}\n" +
		"{%- elif m.role == 'bad' %}{{ raise_exception (\n'Role \"bad\" ' ~ 'is refused') }}{% endif %}\n" +
		"{%- endfor %}"
	tm, err := Compile(file, src, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.Render([]tokenizer.Message{{Role: "user"}}, tokenizer.RenderOptions{})
	if err != nil || got != "raise_exception('in text')[user raise_exception('in a string')]" {
		t.Fatalf("render: %q, %v", got, err)
	}
	for _, c := range []struct {
		role, line, msg string
	}{{"tool", "line 5:", "Tools are not supported: f"}, {"bad", "line 6:", `Role "bad" is refused`}} {
		_, err = tm.Render([]tokenizer.Message{{Role: "user"}, {Role: c.role, Name: "f"}}, tokenizer.RenderOptions{})
		if err == nil || !errors.Is(err, ErrRaised) {
			t.Fatalf("%s: want a raise_exception error, have %v", c.role, err)
		}
		if e := err.Error(); !strings.Contains(e, file) || !strings.Contains(e, c.line) || !strings.Contains(e, c.msg) {
			t.Fatalf("%s: error %q does not name the file, %s and the message", c.role, e, c.line)
		}
	}
}

// TestTemplateFileInErrors: the template's file (chat_template.jinja over
// tokenizer_config.json) is the name errors carry.
func TestTemplateFileInErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "{{ x }}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("ok\n\n{{ raise_exception('no') }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := hf.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := Compile(cfg.ChatTemplateFile, cfg.ChatTemplate, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tm.Render(nil, tokenizer.RenderOptions{})
	want := filepath.Join(dir, "chat_template.jinja") + ": chat_template line 3: raise_exception: no"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestRuntimeErrorsNameLine: every kind of error the engine raises while
// rendering (not only raise_exception) names the template file and the
// line of the failing tag, including a failing elif condition (evaluated
// after the previous branch's tags), an error inside a macro, on a later
// loop iteration, and in a tag that spans lines.
func TestRuntimeErrorsNameLine(t *testing.T) {
	const file = "/models/x/tokenizer_config.json"
	head := "{%- for m in messages %}\n{{- m.role }}\n"
	for _, c := range []struct {
		kind, src, line, msg string
	}{
		{"unknown filter", head + "{{- m.content | shout }}\n{%- endfor %}", "line 3:", `unknown filter "shout"`},
		{"undefined method", head + "\n{{- m.content.shout() }}\n{%- endfor %}", "line 4:", "not callable"},
		{"calling a non-callable", head + "{{- m.role() }}\n{%- endfor %}", "line 3:", "not callable"},
		{"undefined function", "x\n\n\n{{ shout(messages) }}", "line 4:", "not callable"},
		{"type error", head + "{%- set p = m.content | items %}\n{%- endfor %}", "line 3:", "mapping"},
		{"unknown test", head + "{%- if m.content is shouting %}!{% endif %}\n{%- endfor %}", "line 3:", `unknown test "shouting"`},
		{"empty pop", "{%- set l = [] %}\n{{- l.pop() }}", "line 2:", "pop from empty list"},
		{"elif condition", head + "{%- if m.role == 'x' %}\nx\n{%- elif m.content | shout %}\ny{%- endif %}\n{%- endfor %}", "line 5:", `unknown filter "shout"`},
		{"in a macro", "{%- macro f(x) %}\n{{- x | shout }}\n{%- endmacro %}\n{{- f(messages[0].content) }}", "line 2:", `unknown filter "shout"`},
		{"later iteration", head + "{%- if loop.index == 2 %}\n{{- m.content.shout() }}{% endif %}\n{%- endfor %}", "line 4:", "not callable"},
		{"multi-line tag", head + "{{- m.content ~\n m.role ~\n (m.role | shout) }}\n{%- endfor %}", "line 3:", `unknown filter "shout"`},
		{"raw block and comment", "{% raw %}{{ x | shout }}\n{% endraw %}{# {{ y }}\n #}\n{{ messages | shout }}", "line 4:", `unknown filter "shout"`},
	} {
		tm, err := Compile(file, c.src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", c.kind, err)
		}
		if tm.located == nil {
			t.Fatalf("%s: the marked template did not compile", c.kind)
		}
		_, err = tm.Render([]tokenizer.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}}, tokenizer.RenderOptions{})
		if err == nil {
			t.Fatalf("%s: rendered without error", c.kind)
		}
		if e := err.Error(); !strings.Contains(e, file+": chat_template "+c.line) || !strings.Contains(e, c.msg) {
			t.Errorf("%s: error %q does not name the file, %s and %q", c.kind, e, c.line, c.msg)
		}
		var le *LineError
		if !errors.As(err, &le) {
			t.Errorf("%s: not a *LineError: %v", c.kind, err)
		}
	}
}

// TestLineMarksKeepRealTemplates: the marked copy of each installed real
// template compiles and renders what the template renders (so a failed
// render is located on the path the template took).
func TestLineMarksKeepRealTemplates(t *testing.T) {
	for _, model := range tokref.Models {
		cfg, err := hf.LoadConfig(tokref.ModelDir(t, model))
		if err != nil {
			t.Fatal(err)
		}
		tm, err := Compile(cfg.ChatTemplateFile, cfg.ChatTemplate, "<s>", "</s>")
		if err != nil {
			t.Fatal(err)
		}
		if tm.located == nil {
			t.Fatalf("%s: the marked template did not compile", model)
		}
		msgs := []tokenizer.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}, {Role: "user", Content: "more"}}
		want, err := tm.EngineOnly().Render(msgs, tokenizer.RenderOptions{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		at := 0
		got, _, err := tm.EngineOnly().renderOn(tm.located, &at, false, msgs, tokenizer.RenderOptions{AddGenerationPrompt: true}, nil, 0, nil)
		if err != nil || at == 0 {
			t.Fatalf("%s: marked render: %v (line %d)", model, err, at)
		}
		if got != want {
			t.Errorf("%s: marked render differs:\n%q\n%q", model, got, want)
		}
	}
}
