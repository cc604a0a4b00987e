package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrUnknownKey is matched (errors.Is) by every unknown-key error.
var ErrUnknownKey = errors.New("unknown key")

// KeyError is an error about one configuration key. Every error of Parse,
// ApplyOverrides and Validate is a KeyError or a join of them, so a caller
// can list the offending keys with errors.As.
type KeyError struct {
	File string // the file, or "" for overrides and validation
	Line int    // 1-based line in File; 0 when File is ""
	Key  string // dotted path, e.g. "grpo.num_generations_per_prompt"
	Err  error
}

func (e *KeyError) Error() string {
	var b strings.Builder
	if e.File != "" {
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	}
	var uk *unknownKeyError
	if errors.As(e.Err, &uk) {
		fmt.Fprintf(&b, "unknown key %q", e.Key)
		if uk.suggestion != "" {
			fmt.Fprintf(&b, " (did you mean %q?)", uk.suggestion)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%s: %v", e.Key, e.Err)
	return b.String()
}

func (e *KeyError) Unwrap() error { return e.Err }

type unknownKeyError struct{ suggestion string }

func (e *unknownKeyError) Error() string        { return "unknown key" }
func (e *unknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// Load returns the defaults overlaid with the YAML file at path; path ""
// gives the defaults. It does not validate: apply overrides first, then
// call Validate.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse returns the defaults overlaid with the YAML document data; name is
// used in error messages. Keys are strict: every unknown key is reported
// with its line, all at once. It does not validate.
func Parse(name string, data []byte) (*Config, error) {
	if name == "" {
		name = "config"
	}
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil // an empty file means all defaults
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: a config file holds one YAML document", name, extra.Line)
	}
	d := &decoder{file: name}
	if root := doc.Content[0]; !isNull(root) {
		d.section(root, reflect.ValueOf(c).Elem(), "")
	}
	if err := errors.Join(d.errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// decoder walks a yaml.Node tree against the Config type by hand, so that
// every error carries the line and the dotted key.
type decoder struct {
	file string
	errs []error
}

func (d *decoder) fail(n *yaml.Node, key string, err error) {
	d.errs = append(d.errs, &KeyError{File: d.file, Line: n.Line, Key: key, Err: err})
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func (d *decoder) section(n *yaml.Node, v reflect.Value, prefix string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		key := prefix
		if key == "" {
			key = "(root)"
		}
		d.fail(n, key, fmt.Errorf("want a mapping of keys, got %s", describe(n)))
		return
	}
	fields := fieldsOf(v, prefix)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		path := join(prefix, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.fail(k, path, fmt.Errorf("duplicate key (first at line %d)", line))
			continue
		}
		seen[k.Value] = k.Line
		var f *field
		for j := range fields {
			if fields[j].name == k.Value {
				f = &fields[j]
			}
		}
		if f == nil {
			d.fail(k, path, &unknownKeyError{suggestion: suggest(k.Value, names(v))})
			continue
		}
		switch f.value.Kind() {
		case reflect.Struct:
			if !isNull(val) { // an empty section keeps its defaults
				d.section(val, f.value, f.path)
			}
		case reflect.Map:
			d.params(val, *f)
		default:
			d.leaf(val, *f)
		}
	}
}

// params decodes the free-form map, replacing the default.
func (d *decoder) params(n *yaml.Node, f field) {
	if isNull(n) {
		f.value.Set(reflect.MakeMap(f.value.Type()))
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, f.path, fmt.Errorf("want a mapping, got %s", describe(n)))
		return
	}
	m := map[string]any{}
	if err := n.Decode(&m); err != nil {
		d.fail(n, f.path, fmt.Errorf("decode: %w", err))
		return
	}
	f.value.Set(reflect.ValueOf(m))
}

func (d *decoder) leaf(n *yaml.Node, f field) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	t := f.value.Type()
	if t.Kind() == reflect.Slice {
		out := reflect.MakeSlice(t, 0, len(n.Content))
		if !isNull(n) {
			if n.Kind != yaml.SequenceNode {
				d.fail(n, f.path, fmt.Errorf("want %s, got %s", typeName(t), describe(n)))
				return
			}
			for _, e := range n.Content {
				ev, err := d.scalar(e, t.Elem())
				if err != nil {
					d.fail(e, f.path, err)
					return
				}
				out = reflect.Append(out, ev)
			}
		}
		f.value.Set(out)
		return
	}
	v, err := d.scalar(n, t)
	if err != nil {
		d.fail(n, f.path, err)
		return
	}
	f.value.Set(v)
}

// scalar decodes one YAML scalar into type t, checking its resolved tag so
// that, say, a quoted "8" is not taken for an integer.
func (d *decoder) scalar(n *yaml.Node, t reflect.Type) (reflect.Value, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	bad := fmt.Errorf("want %s, got %s", typeName(t), describe(n))
	if n.Kind != yaml.ScalarNode {
		return reflect.Value{}, bad
	}
	tag := n.ShortTag()
	switch t.Kind() {
	case reflect.String:
		if tag == "!!null" {
			return reflect.Zero(t), nil
		}
		return parseScalar(t, n.Value)
	case reflect.Float64:
		if tag != "!!int" && tag != "!!float" {
			return reflect.Value{}, bad
		}
	case reflect.Bool:
		if tag != "!!bool" {
			return reflect.Value{}, bad
		}
	default:
		if tag != "!!int" {
			return reflect.Value{}, bad
		}
	}
	return parseScalar(t, n.Value)
}

// parseScalar parses s as a value of scalar type t. It is shared by the
// file and the command line so that both accept the same spellings.
func parseScalar(t reflect.Type, s string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return v, fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case reflect.Int:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return v, fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(i)
	case reflect.Uint64:
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return v, fmt.Errorf("want a non-negative integer, got %q", s)
		}
		v.SetUint(u)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return v, fmt.Errorf("want a finite number, got %q", s)
		}
		v.SetFloat(x)
	default:
		return v, fmt.Errorf("unsupported type %s", t)
	}
	return v, nil
}

// typeName names a Go type the way a config author thinks of it.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int:
		return "an integer"
	case reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Map:
		return "a mapping"
	}
	return t.String()
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "no value"
		}
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.ShortTag(), "!!"), n.Value)
	}
	return "an unexpected node"
}
