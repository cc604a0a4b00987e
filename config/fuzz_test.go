package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig: any bytes either load, or fail with errors that each
// name the file (and a line and key where there is one); a config that
// loads and validates marshals to YAML that loads to the same digest, and
// one that does not validate is refused key by key. The seeds (the
// examples and a few broken files) run in every `go test`; `go test -fuzz
// FuzzParseConfig ./config` explores (.ci/steps/19-fuzz.sh runs it
// briefly).
func FuzzParseConfig(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	for _, p := range examples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"",
		"run:\n  max_steps: 3\noptim:\n  warmup_steps: 5\n",
		"run: {max_steps: -1, mode: fast}\n",
		"grpo:\n  num_generations_per_prompt: 1.5\n",
		"a: &x {b: *x}\n",
		"run:\n  seed: 99999999999999999999999\n",
		"env:\n  params: {1: 2}\n",
		"---\nrun: {}\n---\nrun: {}\n",
		"run:\n  max_stepz: 3\n",
		"compaction:\n  trigger_range: [70, 40]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml") {
					t.Fatalf("an error line names no file: %q (of %v)", line, err)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key == "" {
				t.Fatalf("a validation error names no key: %v", err)
			}
			return
		}
		y, err := Marshal(c)
		if err != nil {
			t.Fatalf("a valid config does not marshal: %v", err)
		}
		back, err := Parse("again.yaml", y)
		if err != nil {
			t.Fatalf("marshalled config does not load: %v\n%s", err, y)
		}
		if Digest(back) != Digest(c) {
			t.Fatalf("marshalled config loads to another digest: %v", Diff(c, back))
		}
	})
}
