package chat

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The Jinja engine reports the line of a syntax error but not of an error
// raised while rendering. A template's own raise_exception calls (how HF
// templates refuse a conversation) are the runtime errors users meet, so
// Compile rewrites each call `raise_exception(msg)` in the template's code
// into `__longhaul_raise(LINE, msg)`, and the render supplies that
// function: the error names the line of the call. Text outside tags and
// string literals inside them are left alone.

const raiseFn = "__longhaul_raise"

// LineError is a template error at a line of the template source.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// ErrRaised is what a template's raise_exception returns (wrapped with its
// message).
var ErrRaised = errors.New("raise_exception")

// withRaiseLines rewrites raise_exception calls in tags and reports how
// many it rewrote.
func withRaiseLines(src string) (string, int) {
	const name = "raise_exception"
	var b strings.Builder
	line, n := 1, 0
	inTag := false
	var close string
	for i := 0; i < len(src); {
		c := src[i]
		if !inTag {
			switch {
			case strings.HasPrefix(src[i:], "{#"):
				end := strings.Index(src[i:], "#}")
				if end < 0 {
					end = len(src) - i - 2
				}
				seg := src[i : i+end+2]
				line += strings.Count(seg, "\n")
				b.WriteString(seg)
				i += len(seg)
				continue
			case strings.HasPrefix(src[i:], "{%"), strings.HasPrefix(src[i:], "{{"):
				inTag, close = true, map[byte]string{'%': "%}", '{': "}}"}[src[i+1]]
				b.WriteString(src[i : i+2])
				i += 2
				continue
			}
		} else {
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
				line += strings.Count(src[i:j], "\n")
				b.WriteString(src[i:j])
				i = j
				continue
			case strings.HasPrefix(src[i:], close):
				inTag = false
				b.WriteString(close)
				i += len(close)
				continue
			case strings.HasPrefix(src[i:], name) && (i == 0 || !identByte(src[i-1])):
				j := i + len(name)
				for j < len(src) && (src[j] == ' ' || src[j] == '\t') {
					j++
				}
				if j < len(src) && src[j] == '(' {
					fmt.Fprintf(&b, "%s(%d, ", raiseFn, line)
					i = j + 1
					n++
					continue
				}
			}
		}
		if c == '\n' {
			line++
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), n
}

func identByte(c byte) bool {
	return c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// raiseAt is the function the rewritten calls reach.
var raiseAt = jinja.NewCallable(raiseFn, func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	line := 0
	if len(args) > 0 && args[0].IsInt() {
		line = int(args[0].AsInt())
	}
	msg := "(no message)"
	if len(args) > 1 {
		msg = args[1].String()
		if args[1].IsString() {
			msg = args[1].AsString()
		}
	}
	return jinja.Undefined(), &LineError{Line: line, Err: fmt.Errorf("%w: %s", ErrRaised, msg)}
})

// The engine's other runtime errors (an unknown filter or test, calling
// something that is not callable such as a missing method, a value of the
// wrong type for a filter) carry no position either. Rewriting the template
// for them would slow every render, so a render that fails is run again on
// a marked copy of the template: before each tag, `{{ __longhaul_at(LINE) }}`
// records the line it is about to evaluate, and an elif's condition is
// prefixed the same way (it runs after the previous branch's last marker).
// The marked copy differs from the template only in whitespace handling
// around the markers, which cannot change which tags run; the failure
// happens at the line the last marker recorded.

const atFn = "__longhaul_at"

// withLineMarks returns src with a line marker before every tag (comments
// and raw blocks are left as written).
func withLineMarks(src string) string {
	var b strings.Builder
	line := 1
	for i := 0; i < len(src); {
		rest := src[i:]
		switch {
		case strings.HasPrefix(rest, "{#"):
			end := strings.Index(rest, "#}")
			if end < 0 {
				end = len(rest) - 2
			}
			seg := rest[:end+2]
			line += strings.Count(seg, "\n")
			b.WriteString(seg)
			i += len(seg)
			continue
		case strings.HasPrefix(rest, "{%"), strings.HasPrefix(rest, "{{"):
			end := tagEnd(rest)
			tag := rest[:end]
			if word(tag) == "raw" {
				// copy up to and including the endraw tag
				if k := strings.Index(rest, "endraw"); k >= 0 {
					if c := strings.Index(rest[k:], "%}"); c >= 0 {
						tag = rest[:k+c+2]
					}
				}
			}
			fmt.Fprintf(&b, "{{ %s(%d) }}", atFn, line)
			if word(tag) == "elif" {
				k := strings.Index(tag, "elif") + len("elif")
				closeAt := len(tag) - 2
				if tag[closeAt-1] == '-' || tag[closeAt-1] == '+' {
					closeAt--
				}
				fmt.Fprintf(&b, "%s %s(%d) or (%s) %s", tag[:k], atFn, line, tag[k:closeAt], tag[closeAt:])
			} else {
				b.WriteString(tag)
			}
			line += strings.Count(tag, "\n")
			i += len(tag)
			continue
		}
		if src[i] == '\n' {
			line++
		}
		b.WriteByte(src[i])
		i++
	}
	return b.String()
}

// tagEnd is the length of the tag at the start of s ("{%" or "{{"),
// skipping string literals; len(s) if it is not closed.
func tagEnd(s string) int {
	close := "%}"
	if s[1] == '{' {
		close = "}}"
	}
	for j := 2; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\'' || c == '"':
			j++
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
		case strings.HasPrefix(s[j:], close):
			return j + 2
		}
	}
	return len(s)
}

// word is a statement tag's keyword ("" for an expression tag).
func word(tag string) string {
	if !strings.HasPrefix(tag, "{%") {
		return ""
	}
	s := strings.TrimLeft(tag[2:], "-+ \t\r\n")
	n := 0
	for n < len(s) && identByte(s[n]) && s[n] != '.' {
		n++
	}
	return s[:n]
}

// lineTracker is the marker function of one located render.
func lineTracker(line *int) jinja.Value {
	return jinja.NewCallable(atFn, func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) > 0 && args[0].IsInt() {
			*line = int(args[0].AsInt())
		}
		return jinja.NewString(""), nil
	})
}
