package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/hf"
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
