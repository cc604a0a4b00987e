package runner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store"
)

// ConfigsDir holds a copy of every config the run has used, named by its
// digest. The digest in the log (RunStarted, then ConfigChanged) says which
// one is the run's; config.yaml is only the human-readable copy of it, so
// deleting or editing config.yaml cannot change what a resume compares with.
const ConfigsDir = "configs"

func configCopyPath(dir string, d [32]byte) string {
	return filepath.Join(dir, ConfigsDir, hex.EncodeToString(d[:])+".yaml")
}

// saveConfigCopy writes cfg under configs/ durably (fsync'd file, rename,
// fsync'd directory), through the storage seam, before the log names its
// digest.
func saveConfigCopy(fs store.FS, dir string, cfg *config.Config) error {
	b, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	sub := filepath.Join(dir, ConfigsDir)
	if err := fs.MkdirAll(sub, 0o755); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	path := configCopyPath(dir, config.Digest(cfg))
	tmp := path + ".tmp"
	err = store.WriteFile(fs, tmp, b)
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = fs.SyncDir(sub)
	}
	if err != nil {
		fs.Remove(tmp)
		return fmt.Errorf("runner: store config: %w", err)
	}
	return nil
}

// loggedConfig returns the config whose digest the log holds: the copy in
// configs/, or config.yaml when its digest matches (runs started before
// configs/ existed). Either must hash to the logged digest.
func loggedConfig(fs store.FS, dir string, digest [32]byte) (*config.Config, error) {
	for _, path := range []string{configCopyPath(dir, digest), filepath.Join(dir, ConfigFile)} {
		b, err := store.ReadFile(fs, path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		c, err := config.Parse(path, b)
		if err != nil {
			return nil, fmt.Errorf("runner: the run's stored config: %w", err)
		}
		if config.Digest(c) == digest {
			return c, nil
		}
	}
	return nil, fmt.Errorf("runner: the run's config (digest %x in the log) is in neither %s nor %s; pass it with --config",
		digest[:8], filepath.Join(dir, ConfigsDir), filepath.Join(dir, ConfigFile))
}

// resumeConfig decides the config of a resume from the log's digest. With
// fromRun (no --config given) the run's own config plus overrides is used;
// otherwise cfg. A changed key not in allow is refused, naming it; the
// returned changes ("key: old -> new") are to be logged as ConfigChanged.
func resumeConfig(fs store.FS, rl *runlog.Log, dir string, cfg *config.Config, opts Options) (*config.Config, []string, error) {
	var started bool
	var digest [32]byte
	rl.View(func(s *runlog.State) { started, digest = s.Started, s.ConfigDigest })
	if !started {
		return cfg, nil, nil
	}
	if !opts.FromRun && config.Digest(cfg) == digest {
		return cfg, nil, nil
	}
	old, err := loggedConfig(fs, dir, digest)
	if err != nil {
		if !opts.FromRun {
			return nil, nil, fmt.Errorf("%w (the given config differs from the run's: %w)", err, config.ErrConfigChanged)
		}
		return nil, nil, err
	}
	if opts.FromRun {
		cfg = old.Clone()
		if err := cfg.ApplyOverrides(opts.Overrides); err != nil {
			return nil, nil, err
		}
		if err := cfg.Validate(); err != nil {
			return nil, nil, fmt.Errorf("the run's config with overrides: %w", err)
		}
	}
	if err := config.CheckChange(old, cfg, opts.AllowChange); err != nil {
		return nil, nil, fmt.Errorf("runner: resuming %s: %w", dir, err)
	}
	return cfg, config.DescribeChanges(old, cfg), nil
}

// recordConfig makes cfg the run's config: a copy under configs/ before
// the log names it, then (on a resume with allowed changes) ConfigChanged,
// then the readable config.yaml.
func recordConfig(ctx context.Context, fs store.FS, rl *runlog.Log, dir string, cfg *config.Config, changes []string, log *slog.Logger) error {
	if err := saveConfigCopy(fs, dir, cfg); err != nil {
		return err
	}
	if len(changes) > 0 {
		if _, err := rl.Append(ctx, runlog.ConfigChanged{Digest: config.Digest(cfg), Changes: changes}); err != nil {
			return fmt.Errorf("runner: log config change: %w", err)
		}
		log.Warn("resuming with a changed config", "changes", changes)
	}
	return storeConfig(fs, cfg, dir)
}

// withRecoveryChoices adds what a user can do about a damaged run log: the
// error itself names the file and offset.
func withRecoveryChoices(err error, dir string) error {
	var ce *runlog.CorruptionError
	var se *runlog.ShortLogError
	if !errors.As(err, &ce) && !errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("%w\nrecovery choices: (1) restore %s from a backup and resume; "+
		"(2) keep the run up to the damage: in a copy of %s, cut the named chunk file at the named offset, delete later chunk and pack files, "+
		"runlog/verified and runlog/snap/, then resume (what was logged after the cut is redone from the newest checkpoint it covers); "+
		"(3) start a new run in another --run-dir", err, dir, dir)
}
