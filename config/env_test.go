package config

import (
	"strings"
	"testing"
)

func TestEnvKeys(t *testing.T) {
	for _, tc := range []struct {
		overrides []string
		want      string // "" = valid
	}{
		{[]string{"env.kind=http"}, `env.url: want an http(s) URL, got ""`},
		{[]string{"env.kind=http", "env.url=http://127.0.0.1:8092", "env.timeout_s=0"}, "env.timeout_s: must be > 0"},
		{[]string{"env.url=http://127.0.0.1:8092"}, `env.url: is for env.kind http (env.kind is "builtin")`},
		{[]string{"env.kind=grpc"}, `env.kind: must be one of builtin, http, agent, got "grpc"`},
		{[]string{"env.kind=http", "env.url=http://127.0.0.1:8092", "env.max_sessions=-1"}, "env.max_sessions: must be ≥ 0"},
		{[]string{"env.kind=http", "env.url=http://127.0.0.1:8092", "env.max_sessions=4", "warmstart.data=demos.jsonl"}, ""},
		{[]string{"env.kind=agent"}, "env.command: must name the agent program"},
		{[]string{"env.command=[python3, agent.py]"}, `env.command: is for env.kind agent (env.kind is "builtin")`},
		{[]string{"env.kind=agent", "env.command=[python3, agent.py]"}, ""},
	} {
		c := Default()
		if err := c.ApplyOverrides(tc.overrides); err != nil {
			t.Fatalf("%v: %v", tc.overrides, err)
		}
		err := c.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.overrides, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.overrides, err, tc.want)
		}
	}
	if _, err := Parse("f.yaml", []byte("env:\n  kind: http\n  uri: http://x\n")); err == nil || !strings.Contains(err.Error(), "uri") {
		t.Fatalf("unknown env key: %v", err)
	}
}

// TestEnvExample keeps examples/envs/notebook.yaml loadable and valid.
func TestEnvExample(t *testing.T) {
	c, err := Load("../examples/envs/notebook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Env.Kind != "http" || c.Warmstart.Data == "" || c.Data.Source != "jsonl" {
		t.Fatalf("example drifted: %+v %+v", c.Env, c.Warmstart)
	}
}
