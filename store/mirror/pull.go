package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/longhaul-rl/longhaul/store/bucket"
)

// Pull downloads the whole run at prefix into dir (which must not hold
// it yet), every object checked against its SHA-256: a local copy to
// inspect, without taking the run's lease. It returns the manifest copied.
func Pull(ctx context.Context, objs bucket.Objects, prefix, dir string) (*Manifest, error) {
	if prefix != "" {
		prefix += "/"
	}
	man, _, err := readManifest(ctx, objs, prefix+manifestKey)
	if err != nil {
		return nil, err
	}
	if man == nil {
		return nil, fmt.Errorf("mirror: no run at %q", prefix)
	}
	m := &Mirror{objs: objs, prefix: prefix, root: dir, man: man, log: slog.New(slog.DiscardHandler)}
	rels := make([]string, 0, len(man.Files))
	for rel := range man.Files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("mirror: %w", err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("mirror: pull: %w", err)
		}
		err = m.download(f, man.Files[rel])
		if err = errors.Join(err, f.Close()); err != nil {
			return nil, fmt.Errorf("mirror: pulling %s: %w", rel, err)
		}
	}
	return man, nil
}
