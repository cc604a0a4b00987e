package runner

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/env/agentenv"
	"github.com/longhaul-rl/longhaul/env/httpenv"
	"github.com/longhaul-rl/longhaul/store"
)

// RunIDFile holds the run's id in its run directory: the run part of every
// environment idempotency key, the same across resumes and different for
// two runs against one environment server.
const RunIDFile = "run-id"

// Environments returns the registry a run makes its environments from:
// base for env.kind builtin; for http, one definition named env.name whose
// environments are sessions at env.url (its task generator, for
// data.source builtin, is base's environment of that name when there is
// one: a built-in environment served over HTTP).
func Environments(cfg *config.Config, base *env.Registry) (*env.Registry, error) {
	switch cfg.Env.Kind {
	case "http":
	case "agent":
		return agents(cfg, base)
	default:
		return base, nil
	}
	var slots chan struct{}
	if cfg.Env.MaxSessions > 0 {
		slots = make(chan struct{}, cfg.Env.MaxSessions)
	}
	url := strings.TrimRight(cfg.Env.URL, "/")
	timeout := time.Duration(cfg.Env.TimeoutS * float64(time.Second))
	name := cfg.Env.Name
	def := env.Definition{Name: name, New: func(params json.RawMessage) (env.Environment, error) {
		c := httpenv.New(url, name, params)
		c.Timeout, c.Slots = timeout, slots
		return c, nil
	}}
	if d, err := base.Lookup(name); err == nil {
		def.Task = d.Task
	}
	reg := env.NewRegistry()
	if err := reg.Register(def); err != nil {
		return nil, err
	}
	return reg, nil
}

// agents is the registry of env.kind agent: env.name's environment runs
// env.command per rollout.
func agents(cfg *config.Config, base *env.Registry) (*env.Registry, error) {
	argv := append([]string(nil), cfg.Env.Command...)
	def := env.Definition{Name: cfg.Env.Name, New: func(json.RawMessage) (env.Environment, error) {
		return &agentenv.Env{Command: argv}, nil
	}}
	if d, err := base.Lookup(cfg.Env.Name); err == nil {
		def.Task = d.Task
	}
	reg := env.NewRegistry()
	return reg, reg.Register(def)
}

// RunID reads the run directory's id, making one on the first start.
func RunID(fs store.FS, dir string) (string, error) {
	path := filepath.Join(dir, RunIDFile)
	b, err := store.ReadFile(fs, path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || strings.ContainsAny(id, "/ ") {
			return "", fmt.Errorf("runner: %s: bad run id %q", path, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("runner: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	if err := store.WriteAtomic(fs, path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("runner: %w", err)
	}
	return id, nil
}
