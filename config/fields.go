package config

import (
	"reflect"
	"strings"
)

// field is one key of the configuration: a section (a struct) or a leaf.
type field struct {
	name   string // the YAML key
	path   string // dotted path from the root
	doc    string
	enum   []string // allowed values; nil when any value of the type is
	digest bool     // whether the key takes part in Digest and Diff
	value  reflect.Value
}

// fieldsOf lists the keys of struct value v (whose own dotted path is
// prefix) in declaration order.
func fieldsOf(v reflect.Value, prefix string) []field {
	t := v.Type()
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		f := field{
			name:   name,
			path:   join(prefix, name),
			doc:    sf.Tag.Get("doc"),
			digest: sf.Tag.Get("digest") != "-",
			value:  v.Field(i),
		}
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, "|")
		}
		out = append(out, f)
	}
	return out
}

// leaves lists every leaf key under v, depth first, in declaration order.
func leaves(v reflect.Value, prefix string) []field {
	var out []field
	for _, f := range fieldsOf(v, prefix) {
		if f.value.Kind() == reflect.Struct {
			out = append(out, leaves(f.value, f.path)...)
			continue
		}
		out = append(out, f)
	}
	return out
}

// lookup finds the field at a dotted path. The bool result reports whether
// the path ends inside a map (env.params.x): then the field is the map and
// rest is the key inside it.
func lookup(c *Config, path string) (f field, rest string, ok bool) {
	v := reflect.ValueOf(c).Elem()
	prefix := ""
	parts := strings.Split(path, ".")
	for i, p := range parts {
		found := false
		for _, cand := range fieldsOf(v, prefix) {
			if cand.name != p {
				continue
			}
			found = true
			switch {
			case cand.value.Kind() == reflect.Struct && i < len(parts)-1:
				v, prefix = cand.value, cand.path
			case cand.value.Kind() == reflect.Map && i < len(parts)-1:
				return cand, strings.Join(parts[i+1:], "."), true
			case i == len(parts)-1:
				return cand, "", true
			default:
				return field{}, "", false
			}
			break
		}
		if !found {
			return field{}, "", false
		}
	}
	return field{}, "", false
}

// names lists the keys of a struct type, for suggestions.
func names(v reflect.Value) []string {
	fs := fieldsOf(v, "")
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// suggest returns the candidate closest to s by edit distance, or "" when
// none is close enough to be a likely typo.
func suggest(s string, candidates []string) string {
	best, bestD := "", len(s)/2+2
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
