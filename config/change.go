package config

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// CheckAllowed reports the first name in allowed that is not a key or
// section of the configuration (an --allow-config-change typo would
// otherwise silently allow nothing).
func CheckAllowed(allowed []string) error {
	c := &Config{}
	for _, a := range allowed {
		if _, _, ok := lookup(c, a); ok {
			continue
		}
		// env.params entries are free-form: any key under it is allowed.
		if strings.HasPrefix(a, "env.params.") {
			continue
		}
		msg := fmt.Sprintf("--allow-config-change: unknown key %q", a)
		if s := suggestPath(c, a); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return fmt.Errorf("%s: %w", msg, ErrUnknownKey)
	}
	return nil
}

// DescribeChanges lists "key: old -> new" for every key Diff names, sorted
// by key; a key present on one side only shows "(unset)" on the other.
func DescribeChanges(old, cur *Config) []string {
	fo, fc := old.Flatten(), cur.Flatten()
	show := func(m map[string]any, k string) string {
		v, ok := m[k]
		if !ok {
			return "(unset)"
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	}
	keys := Diff(old, cur)
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s: %s -> %s", k, show(fo, k), show(fc, k))
	}
	return out
}
