package chat

import (
	"math"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
	"github.com/longhaul-rl/longhaul/tokenizer"
)

// TestPyFloat: floats as Python's repr writes them (the expected strings
// are Python 3.11's repr of each value).
func TestPyFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{2.0, "2.0"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {1e-05, "1e-05"}, {0.0001, "0.0001"},
		{1234567.5, "1234567.5"}, {1.5e-07, "1.5e-07"}, {1e21, "1e+21"}, {1e300, "1e+300"},
		{123456789012345.0, "123456789012345.0"}, {2.5e16, "2.5e+16"}, {100.0, "100.0"}, {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {-3.25, "-3.25"},
		{9007199254740992.0, "9007199254740992.0"}, {0.5, "0.5"}, {12345678.9, "12345678.9"},
	} {
		if got, _ := pyFloat(c.f); got != c.want {
			t.Errorf("pyFloat(%v) = %q, want %q", c.f, got, c.want)
		}
	}
	a, b := 0.1, 0.2 // not constants: Go would add them exactly
	for _, c := range []struct {
		f    float64
		want string
	}{{a + b, "0.30000000000000004"}, {math.Copysign(0, -1), "-0.0"}, {0, "0.0"}, {math.Inf(-1), "-Infinity"}, {math.NaN(), "NaN"}} {
		if got, _ := pyFloat(c.f); got != c.want {
			t.Errorf("pyFloat(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// TestPyJSON: the tojson filter as transformers' json.dumps(...,
// ensure_ascii=False) writes it, with its keywords. The expected strings
// are Python 3.11's json.dumps of the same JSON value.
func TestPyJSON(t *testing.T) {
	v := `{"a": "\u2028\ufdd0\"\\\n\t\b\f\u0000\u001f\u007f<&>\ud83d\ude00\u00e9", "b": [1, 2.0, -0.0, 1e16, {}, []], "c": {}, "d": null, "e": true}`
	for _, c := range []struct{ tmpl, want string }{
		{`{{ v | tojson }}`, "{\"a\": \"\u2028\ufdd0\\\"\\\\\\n\\t\\b\\f\\u0000\\u001f\u007f<&>\U0001F600\u00e9\", \"b\": [1, 2.0, -0.0, 1e+16, {}, []], \"c\": {}, \"d\": null, \"e\": true}"},
		{`{{ v|tojson(indent=2) }}`, "{\n  \"a\": \"\u2028\ufdd0\\\"\\\\\\n\\t\\b\\f\\u0000\\u001f\u007f<&>\U0001F600\u00e9\",\n  \"b\": [\n    1,\n    2.0,\n    -0.0,\n    1e+16,\n    {},\n    []\n  ],\n  \"c\": {},\n  \"d\": null,\n  \"e\": true\n}"},
		{`{{ v | tojson(ensure_ascii=true, sort_keys=true, separators=[",", ":"]) }}`, "{\"a\":\"\\u2028\\ufdd0\\\"\\\\\\n\\t\\b\\f\\u0000\\u001f\\u007f<&>\\ud83d\\ude00\\u00e9\",\"b\":[1,2.0,-0.0,1e+16,{},[]],\"c\":{},\"d\":null,\"e\":true}"},
		// text and string literals are not rewritten
		{`| tojson {{ "| tojson" }}{# | tojson #}{% raw %}{{ x | tojson }}{% endraw %}`, `| tojson | tojson{{ x | tojson }}`},
		{"{{ ' \x1chi\x1f\u0085 ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 5 | trim }}", "hi|hi|5"},
		{`{% filter trim %} a {% endfilter %}`, "a"},
	} {
		tm, err := Compile("test", c.tmpl, "", "")
		if err != nil {
			t.Fatal(err)
		}
		val, err := jsonValue([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		data := map[string]jinja.Value{"v": val, pyJSONFn: pyJSON, pyTrimFn: pyTrim}
		got, err := tm.t.RenderValues(data)
		if err != nil || got != c.want {
			t.Errorf("%s:\n got %q (%v)\nwant %q", c.tmpl, got, err, c.want)
		}
	}
	// and through Render, which supplies the filters
	tm, err := Compile("test", `{{ messages[0].tool_calls[0].function.arguments | tojson }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.Render([]tokenizer.Message{{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{Name: "f", Arguments: []byte(`{"x": "\u2028", "y": 2.0}`)}}}}, tokenizer.RenderOptions{})
	if want := "{\"x\": \"\u2028\", \"y\": 2.0}"; err != nil || got != want {
		t.Errorf("Render: got %q (%v), want %q", got, err, want)
	}
}

// TestPySpace: pySpace is Python's str.isspace over every code point (the
// list is Python 3.11's [c for c in range(0x110000) if chr(c).isspace()]).
func TestPySpace(t *testing.T) {
	want := map[rune]bool{}
	for _, c := range []rune{0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002,
		0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000} {
		want[c] = true
	}
	for c := rune(0); c <= 0x10ffff; c++ {
		if pySpace(c) != want[c] {
			t.Errorf("pySpace(%U) = %v", c, pySpace(c))
		}
	}
	if got := pyStrip("\x1c\u0085 a\ufeff \u3000\x1f"); got != "a\ufeff" {
		t.Errorf("pyStrip: %q", got)
	}
	if !strings.Contains(withPythonFilters(`{{ a|trim }}`), pyTrimFn) {
		t.Error("trim not rewritten")
	}
}

// BenchmarkToJSON: longhaul's tojson against the engine's on tool-call
// arguments (what the Go renderings write per tool call), in one run.
func BenchmarkToJSON(b *testing.B) {
	v, err := jsonValue([]byte(`{"city": "Zürich", "amount": 1234.5, "memo": "a note\nwith a line", "tags": ["x", "y", 3], "nested": {"k": true, "n": null}}`))
	if err != nil {
		b.Fatal(err)
	}
	engine, err := jinja.Compile(`{{ a | tojson }}`)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("path=engine", func(b *testing.B) {
		for b.Loop() {
			if _, err := engine.RenderValues(map[string]jinja.Value{"a": v}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("path=python", func(b *testing.B) {
		for b.Loop() {
			if _, err := toJSON(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
