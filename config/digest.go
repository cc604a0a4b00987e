package config

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Flatten maps every dotted key that takes part in the digest to its
// value; env.params contributes one key per top-level parameter
// ("env.params.NAME"). Nil and empty lists are the same value.
func (c *Config) Flatten() map[string]any {
	out := map[string]any{}
	for _, f := range leaves(reflect.ValueOf(c).Elem(), "") {
		if !f.digest {
			continue
		}
		switch f.value.Kind() {
		case reflect.Map:
			iter := f.value.MapRange()
			for iter.Next() {
				out[f.path+"."+iter.Key().String()] = iter.Value().Interface()
			}
		case reflect.Slice:
			if f.value.Len() == 0 {
				out[f.path] = []any{}
			} else {
				out[f.path] = f.value.Interface()
			}
		default:
			out[f.path] = f.value.Interface()
		}
	}
	return out
}

// Canonical is the canonical encoding the digest hashes: JSON of the
// flattened keys, sorted (encoding/json sorts map keys at every level).
func Canonical(c *Config) ([]byte, error) {
	b, err := json.Marshal(c.Flatten())
	if err != nil {
		return nil, fmt.Errorf("canonical config: %w", err)
	}
	return b, nil
}

// Digest is the SHA-256 of Canonical(c); the run log records it in
// RunStarted. generator.api_key is not part of it. A config whose
// env.params cannot be encoded as JSON hashes as its error text, which
// Validate-clean configs from YAML never produce.
func Digest(c *Config) [32]byte {
	b, err := Canonical(c)
	if err != nil {
		b = []byte(err.Error())
	}
	return sha256.Sum256(b)
}

// Diff lists, sorted, the dotted keys whose values differ between a and b
// (a key present in only one, such as an env.params entry, differs too).
// Resume uses it to name the keys a changed config touches.
func Diff(a, b *Config) []string {
	fa, fb := a.Flatten(), b.Flatten()
	var out []string
	for k, va := range fa {
		vb, ok := fb[k]
		if !ok || !sameJSON(va, vb) {
			out = append(out, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// sameJSON compares by canonical encoding, so that equal values of
// different Go types from YAML (int 2 vs float 2.0 stay different, as the
// digest sees them) agree exactly with Digest.
func sameJSON(a, b any) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}

// Marshal renders c as YAML, with every key, in declaration order.
func Marshal(c *Config) ([]byte, error) {
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	return b, nil
}

// Clone returns a deep copy of c, so that overrides on the copy leave c
// alone (lists and env.params are shared by a plain struct copy).
func (c *Config) Clone() *Config {
	out := *c
	out.Generator.URLs = append([]string(nil), c.Generator.URLs...)
	out.Compaction.TriggerRange = append([]int(nil), c.Compaction.TriggerRange...)
	if c.Env.Params != nil {
		out.Env.Params = deepCopy(c.Env.Params).(map[string]any)
	}
	return &out
}

func deepCopy(x any) any {
	switch x := x.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, v := range x {
			m[k] = deepCopy(v)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, v := range x {
			s[i] = deepCopy(v)
		}
		return s
	}
	return x
}

// ErrConfigChanged is matched by the error of CheckChange.
var ErrConfigChanged = errors.New("config changed")

// CheckChange is the resume rule: cur may differ from logged only in keys
// that allowed names (a key, or a prefix ending a section such as "optim"
// or "env.params"). The error names every other changed key.
func CheckChange(logged, cur *Config, allowed []string) error {
	var bad []string
	for _, k := range Diff(logged, cur) {
		if !slices.ContainsFunc(allowed, func(a string) bool { return k == a || strings.HasPrefix(k, a+".") }) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w since the run started: %s (allow with --allow-config-change=%s)",
			ErrConfigChanged, strings.Join(bad, ", "), strings.Join(bad, ","))
	}
	return nil
}
