package chat

// Python semantics where the Jinja engine's differ. Hugging Face chat
// templates are written for Python Jinja2 as transformers sets it up
// (apply_chat_template); the engine follows Go's library instead in two
// filters the real templates use:
//
//   - tojson: transformers replaces Jinja's with json.dumps(x,
//     ensure_ascii=False, ...). The engine's escapes U+2028/U+2029
//     (encoding/json's JavaScript-safe escaping) and writes floats in Go's
//     %g (1.2345675e+06 for 1234567.5, 2 for 2.0, -0 for -0.0), where
//     Python writes them raw and in repr's form.
//   - trim: Python's str.strip() removes what str.isspace() calls
//     whitespace, which includes U+001C..U+001F (the information
//     separators); Go's strings.TrimSpace does not (Llama 3.1's template
//     trims every message).
//
// Compile rewrites the template's `| tojson` and `| trim` into the
// functions below (passed with the render's data: the engine looks a
// filter up among its builtins first, then among the data), so both the
// engine and the Go renderings (qwen3.go, seq.go) use one implementation.
// The JavaScript reference, @huggingface/jinja, departs from Python in
// these same places (docs/tokenizers.md); Python is followed.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

const (
	pyJSONFn = "__longhaul_tojson"
	pyTrimFn = "__longhaul_trim"
)

// pyFilters are the rewritten filters: the engine's name → the data name.
var pyFilters = map[string]string{"tojson": pyJSONFn, "trim": pyTrimFn}

// withPythonFilters rewrites `| name` (name one of pyFilters) in the
// template's tags, outside string literals, keeping every other byte (and
// so every line). A {% filter trim %} block keeps the engine's filter.
func withPythonFilters(src string) string {
	var b strings.Builder
	inTag := false
	var closer string
	for i := 0; i < len(src); {
		c := src[i]
		if !inTag {
			switch {
			case strings.HasPrefix(src[i:], "{#"):
				end := strings.Index(src[i:], "#}")
				if end < 0 {
					end = len(src) - i - 2
				}
				b.WriteString(src[i : i+end+2])
				i += end + 2
				continue
			case strings.HasPrefix(src[i:], "{%"), strings.HasPrefix(src[i:], "{{"):
				end := tagEnd(src[i:])
				if word(src[i:i+end]) == "raw" {
					if k := strings.Index(src[i:], "endraw"); k >= 0 {
						if e := strings.Index(src[i+k:], "%}"); e >= 0 {
							b.WriteString(src[i : i+k+e+2])
							i += k + e + 2
							continue
						}
					}
				}
				inTag, closer = true, map[byte]string{'%': "%}", '{': "}}"}[src[i+1]]
				b.WriteString(src[i : i+2])
				i += 2
				continue
			}
			b.WriteByte(c)
			i++
			continue
		}
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			b.WriteString(src[i:j])
			i = j
			continue
		case strings.HasPrefix(src[i:], closer):
			inTag = false
			b.WriteString(closer)
			i += len(closer)
			continue
		case c == '|':
			j := i + 1
			for j < len(src) && (src[j] == ' ' || src[j] == '\t' || src[j] == '\n' || src[j] == '\r') {
				j++
			}
			k := j
			for k < len(src) && identByte(src[k]) && src[k] != '.' {
				k++
			}
			if to, ok := pyFilters[src[j:k]]; ok {
				b.WriteString(src[i:j] + to)
				i = k
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// engineTrim is the engine's own trim, for values that are not strings
// (the engine prints them its way first).
var engineTrim = func() *jinja.Template {
	t, err := jinja.Compile(`{%- if c is defined %}{{- a | trim(c) }}{%- else %}{{- a | trim }}{%- endif %}`)
	if err != nil {
		panic(err)
	}
	return t
}()

// pyTrim is Jinja2's trim filter: str.strip(chars).
var pyTrim = jinja.NewCallable(pyTrimFn, func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	if !args[0].IsString() {
		data := map[string]jinja.Value{"a": args[0]}
		if len(args) > 1 {
			data["c"] = args[1]
		}
		s, err := engineTrim.RenderValues(data)
		return jinja.NewString(s), err
	}
	if len(args) > 1 && args[1].IsString() {
		return jinja.NewString(strings.Trim(args[0].AsString(), args[1].AsString())), nil
	}
	return jinja.NewString(pyStrip(args[0].AsString())), nil
})

// pySpace is Python's str.isspace for one character: Unicode White_Space
// (Go's unicode.IsSpace) plus U+001C..U+001F, which Python counts as
// whitespace (bidirectional class B or S) and Unicode does not.
func pySpace(r rune) bool {
	switch {
	case r >= 0x1c && r <= 0x1f:
		return true
	case r < 0x80:
		return r == ' ' || r >= '\t' && r <= '\r'
	}
	return r == 0x85 || r == 0xa0 || r == 0x1680 || r >= 0x2000 && r <= 0x200a || r == 0x2028 || r == 0x2029 ||
		r == 0x202f || r == 0x205f || r == 0x3000
}

// pyStrip is Python's str.strip() with no argument.
func pyStrip(s string) string { return strings.TrimFunc(s, pySpace) }

// pyJSON is transformers' tojson filter: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), each keyword honoured.
var pyJSON = jinja.NewCallable(pyJSONFn, func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	var o jsonOpts
	if v, ok := kw["ensure_ascii"]; ok {
		o.ascii = v.IsTruthy()
	}
	if v, ok := kw["sort_keys"]; ok {
		o.sortKeys = v.IsTruthy()
	}
	if v, ok := kw["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			o.indent, o.indented = strings.Repeat(" ", max(0, int(v.AsInt()))), true
		case v.IsString():
			o.indent, o.indented = v.AsString(), true
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an int or a string")
		}
	}
	o.item, o.key = ", ", ": "
	if o.indented {
		o.item = ","
	}
	if v, ok := kw["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), fmt.Errorf("tojson: separators must be two strings")
		}
		o.item, o.key = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	var b strings.Builder
	if err := o.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
})

// toJSON is tojson with the defaults, as the Go renderings write tools and
// arguments.
func toJSON(v jinja.Value) (string, error) {
	o := jsonOpts{item: ", ", key: ": "}
	var b strings.Builder
	err := o.encode(&b, v, 0)
	return b.String(), err
}

type jsonOpts struct {
	item, key, indent string
	indented, ascii   bool
	sortKeys          bool
}

func (o *jsonOpts) newline(b *strings.Builder, level int) {
	if o.indented {
		b.WriteByte('\n')
		for range level {
			b.WriteString(o.indent)
		}
	}
}

func (o *jsonOpts) encode(b *strings.Builder, v jinja.Value, level int) error {
	switch {
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		s, err := pyFloat(v.AsFloat())
		if err != nil {
			return err
		}
		b.WriteString(s)
	case v.IsString():
		o.str(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.item)
			}
			o.newline(b, level+1)
			if err := o.encode(b, it, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if o.sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.item)
			}
			o.newline(b, level+1)
			o.str(b, k)
			b.WriteString(o.key)
			if err := o.encode(b, d.Data[k], level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte('}')
	default: // none, undefined, callables: the engine's null
		b.WriteString("null")
	}
	return nil
}

// str writes s as json.dumps does: the two-character escapes, other C0
// controls as \u00XX, everything else as is (U+2028/U+2029 and
// noncharacters included) unless ensure_ascii (then DEL and all that is
// not ASCII as \uXXXX, in UTF-16). Invalid UTF-8 (which a
// Python string cannot hold) becomes U+FFFD, as in encoding/json.
func (o *jsonOpts) str(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 || c == 0x7f && o.ascii {
					b.WriteString(`\u00`)
					b.WriteByte(hex[c>>4])
					b.WriteByte(hex[c&0xf])
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if o.ascii {
			units := []rune{r}
			if r > 0xffff {
				r -= 0x10000
				units = []rune{0xd800 + r>>10, 0xdc00 + r&0x3ff}
			}
			for _, u := range units {
				b.WriteString(`\u`)
				for sh := 12; sh >= 0; sh -= 4 {
					b.WriteByte(hex[(u>>sh)&0xf])
				}
			}
		} else if r == utf8.RuneError && n == 1 {
			b.WriteString("\ufffd")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
}

// pyFloat is Python's repr of a float (what json.dumps writes): the
// shortest digits that read back, positional with at least one decimal
// ("2.0", "0.0001") when the decimal exponent is in [-4, 16), else
// scientific with a signed exponent of at least two digits ("1e-05",
// "1e+16", "1.5e+300").
func pyFloat(f float64) (string, error) {
	switch {
	case math.IsNaN(f):
		// json.dumps writes these (not JSON); JSON input cannot hold
		// them, only a template's own arithmetic can make them.
		return "NaN", nil
	case math.IsInf(f, 1):
		return "Infinity", nil
	case math.IsInf(f, -1):
		return "-Infinity", nil
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	x, _ := strconv.Atoi(exp)
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Replace(strings.TrimPrefix(mant, "-"), ".", "", 1)
	var s string
	if x < -4 || x >= 16 {
		s = digits[:1]
		if len(digits) > 1 {
			s += "." + digits[1:]
		}
		sign := "+"
		if x < 0 {
			sign, x = "-", -x
		}
		s += fmt.Sprintf("e%s%02d", sign, x)
	} else if x < 0 {
		s = "0." + strings.Repeat("0", -x-1) + digits
	} else if len(digits) <= x+1 {
		s = digits + strings.Repeat("0", x+1-len(digits)) + ".0"
	} else {
		s = digits[:x+1] + "." + digits[x+1:]
	}
	if neg {
		s = "-" + s
	}
	return s, nil
}
