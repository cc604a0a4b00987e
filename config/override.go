package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Apply applies dotted overrides to c; see (*Config).ApplyOverrides.
func Apply(c *Config, overrides []string) error { return c.ApplyOverrides(overrides) }

// ApplyOverrides sets keys from "dotted.key=value" strings, in order, e.g.
// "grpo.num_generations_per_prompt=8" or "run.mode=throughput". Values are
// parsed by the key's type (integer, number, true/false, string); a list
// takes "a,b" or a YAML flow list "[a, b]" ("" or "[]" for empty); an
// env.params key takes any YAML scalar or flow value. Every failing
// override is reported, each naming its key. It does not validate.
func (c *Config) ApplyOverrides(overrides []string) error {
	var errs []error
	for _, o := range overrides {
		if err := c.applyOne(o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Config) applyOne(o string) error {
	key, val, ok := strings.Cut(o, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return &KeyError{Key: o, Err: errors.New(`want an override of the form key=value`)}
	}
	f, rest, found := lookup(c, key)
	if !found {
		return &KeyError{Key: key, Err: &unknownKeyError{suggestion: suggestPath(c, key)}}
	}
	switch f.value.Kind() {
	case reflect.Struct:
		return &KeyError{Key: key, Err: errors.New("is a section; set one of its keys")}
	case reflect.Map:
		if rest == "" {
			return &KeyError{Key: key, Err: errors.New("is a mapping; set one of its keys, e.g. " + key + ".name=value")}
		}
		var x any
		if err := yaml.Unmarshal([]byte(val), &x); err != nil {
			return &KeyError{Key: key, Err: fmt.Errorf("parse value: %w", err)}
		}
		if f.value.IsNil() {
			f.value.Set(reflect.MakeMap(f.value.Type()))
		}
		setNested(f.value.Interface().(map[string]any), strings.Split(rest, "."), x)
		return nil
	case reflect.Slice:
		items, err := splitList(val)
		if err != nil {
			return &KeyError{Key: key, Err: err}
		}
		out := reflect.MakeSlice(f.value.Type(), 0, len(items))
		for _, it := range items {
			ev, err := parseScalar(f.value.Type().Elem(), it)
			if err != nil {
				return &KeyError{Key: key, Err: err}
			}
			out = reflect.Append(out, ev)
		}
		f.value.Set(out)
		return nil
	}
	if f.value.Kind() != reflect.String {
		val = strings.TrimSpace(val) // a string keeps its spaces, as quoted
	}
	v, err := parseScalar(f.value.Type(), val)
	if err != nil {
		return &KeyError{Key: key, Err: err}
	}
	f.value.Set(v)
	return nil
}

// setNested sets m[a][b]... = x, making inner maps as needed, so that
// env.params.reward.scale=2 lands where the YAML form would put it.
func setNested(m map[string]any, path []string, x any) {
	for _, p := range path[:len(path)-1] {
		inner, ok := m[p].(map[string]any)
		if !ok {
			inner = map[string]any{}
			m[p] = inner
		}
		m = inner
	}
	m[path[len(path)-1]] = x
}

// splitList reads "a,b", "[a, b]", "" or "[]".
func splitList(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		var items []string
		if err := yaml.Unmarshal([]byte(s), &items); err != nil {
			return nil, fmt.Errorf("parse list: %w", err)
		}
		return items, nil
	}
	if s == "" {
		return nil, nil
	}
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items, nil
}

// suggestPath suggests a full dotted key for a misspelled one: the closest
// key of the section when the section exists, else the closest of all.
func suggestPath(c *Config, key string) string {
	all := leaves(reflect.ValueOf(c).Elem(), "")
	paths := make([]string, 0, len(all))
	for _, f := range all {
		paths = append(paths, f.path)
	}
	return suggest(key, paths)
}
