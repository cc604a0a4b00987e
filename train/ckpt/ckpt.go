// Package ckpt writes and verifies trainer checkpoints: a directory of files
// with a manifest holding each file's SHA-256, published by atomic rename so
// that a crash leaves either the whole checkpoint or none of it.
//
// Layout under the checkpoints directory:
//
//	step-00000012/manifest.json   {"step":12,"version":12,"files":{...}}
//	step-00000012/model.safetensors ...
//	.tmp-step-00000012/           a checkpoint being written (never loaded)
package ckpt

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/longhaul-rl/longhaul/store"
)

// ManifestName is the manifest file inside a checkpoint directory.
const ManifestName = "manifest.json"

// Manifest describes a complete checkpoint.
type Manifest struct {
	Step    int64             `json:"step"`
	Version int64             `json:"version"`
	Metric  *float64          `json:"metric,omitempty"` // for keep_top_k retention
	Files   map[string]string `json:"files"`            // name -> SHA-256 hex
	Meta    map[string]string `json:"meta,omitempty"`
}

// ErrCorrupt marks a checkpoint that must not be loaded.
var ErrCorrupt = errors.New("ckpt: corrupt checkpoint")

// DirName is the directory name of the checkpoint of a step.
func DirName(step int64) string { return fmt.Sprintf("step-%08d", step) }

// Write creates root/DirName(m.Step) durably: fill writes the checkpoint's
// files into a temporary directory (a trainer's SaveCheckpoint, local or
// remote on a shared file system); then every file is hashed into the
// manifest and fsync'd, the manifest is written, the directory is fsync'd,
// renamed into place, and the parent is fsync'd. It returns the final path
// and the SHA-256 of the manifest bytes. On error the temporary directory is
// removed and every older checkpoint is untouched.
func Write(root string, m Manifest, fill func(dir string) error) (path string, digest [32]byte, err error) {
	return WriteFS(store.OS, root, m, fill)
}

// WriteFS is Write with its own writes (fsyncs, manifest, renames) going
// through fs; the files fill writes are the trainer's.
func WriteFS(fs store.FS, root string, m Manifest, fill func(dir string) error) (path string, digest [32]byte, err error) {
	if err := fs.MkdirAll(root, 0o755); err != nil {
		return "", digest, fmt.Errorf("ckpt: %w", err)
	}
	final := filepath.Join(root, DirName(m.Step))
	tmp := filepath.Join(root, ".tmp-"+DirName(m.Step))
	if err := fs.RemoveAll(tmp); err != nil {
		return "", digest, fmt.Errorf("ckpt: clearing %s: %w", tmp, err)
	}
	if err := fs.MkdirAll(tmp, 0o755); err != nil {
		return "", digest, fmt.Errorf("ckpt: %w", err)
	}
	defer func() {
		if err != nil {
			fs.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp); err != nil {
		return "", digest, fmt.Errorf("ckpt: writing step %d: %w", m.Step, err)
	}
	des, err := fs.ReadDir(tmp)
	if err != nil {
		return "", digest, fmt.Errorf("ckpt: %w", err)
	}
	m.Files = make(map[string]string, len(des))
	for _, de := range des {
		if de.Name() == ManifestName || !de.Type().IsRegular() {
			return "", digest, fmt.Errorf("ckpt: step %d: unexpected entry %q", m.Step, de.Name())
		}
	}
	// Every file is hashed (from the page cache) while it is being
	// fsync'd, and files in parallel: hashing and the disk then overlap
	// instead of taking turns.
	sums := make([][32]byte, len(des))
	errs := make([]error, 2*len(des))
	var wg sync.WaitGroup
	for i, de := range des {
		path := filepath.Join(tmp, de.Name())
		wg.Add(2)
		go func() { defer wg.Done(); sums[i], errs[2*i] = hashFile(fs, path) }()
		go func() { defer wg.Done(); errs[2*i+1] = store.SyncFile(fs, path) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", digest, fmt.Errorf("ckpt: step %d: %w", m.Step, err)
	}
	for i, de := range des {
		m.Files[de.Name()] = hex.EncodeToString(sums[i][:])
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", digest, fmt.Errorf("ckpt: %w", err)
	}
	if err := store.WriteFile(fs, filepath.Join(tmp, ManifestName), mb); err != nil {
		return "", digest, fmt.Errorf("ckpt: writing manifest of step %d: %w", m.Step, err)
	}
	if err := syncDir(fs, tmp); err != nil {
		return "", digest, err
	}
	// A checkpoint of the same step may exist from before a resume; the new
	// one replaces it (it holds the same state in deterministic mode).
	if err := fs.RemoveAll(final); err != nil {
		return "", digest, fmt.Errorf("ckpt: %w", err)
	}
	if err := fs.Rename(tmp, final); err != nil {
		return "", digest, fmt.Errorf("ckpt: publishing step %d: %w", m.Step, err)
	}
	if err := syncDir(fs, root); err != nil {
		return "", digest, err
	}
	return final, sha256.Sum256(mb), nil
}

func hashFile(fs store.FS, path string) (sum [32]byte, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

func syncDir(fs store.FS, dir string) error {
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("ckpt: fsync %s: %w", dir, err)
	}
	return nil
}

// Verify reads dir's manifest and checks every file's digest. It returns
// the manifest and the manifest's SHA-256, or an error wrapping ErrCorrupt
// that says what is wrong.
func Verify(dir string) (Manifest, [32]byte, error) { return VerifyFS(store.OS, dir) }

// VerifyFS is Verify reading through fs (on a mirrored run directory this
// fetches the checkpoint's files, so a trainer then finds them locally).
func VerifyFS(fs store.FS, dir string) (Manifest, [32]byte, error) {
	var m Manifest
	var digest [32]byte
	mb, err := store.ReadFile(fs, filepath.Join(dir, ManifestName))
	if err != nil {
		return m, digest, fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
	}
	if err := json.Unmarshal(mb, &m); err != nil {
		return m, digest, fmt.Errorf("%w: %s: manifest: %v", ErrCorrupt, dir, err)
	}
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := fs.Open(filepath.Join(dir, n))
		if err != nil {
			return m, digest, fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return m, digest, fmt.Errorf("%w: %s: %v", ErrCorrupt, dir, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != m.Files[n] {
			return m, digest, fmt.Errorf("%w: %s: %s has SHA-256 %s, manifest says %s", ErrCorrupt, dir, n, got[:12], m.Files[n][:min(12, len(m.Files[n]))])
		}
	}
	return m, sha256.Sum256(mb), nil
}

// Entry is one published checkpoint directory.
type Entry struct {
	Step int64
	Path string
}

// List returns the published checkpoints under root, oldest first.
// Temporary directories are ignored.
func List(root string) ([]Entry, error) { return ListFS(store.OS, root) }

// ListFS is List reading through fs.
func ListFS(fs store.FS, root string) ([]Entry, error) {
	des, err := fs.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	var out []Entry
	for _, de := range des {
		var step int64
		if !de.IsDir() {
			continue
		}
		if _, err := fmt.Sscanf(de.Name(), "step-%d", &step); err != nil || de.Name() != DirName(step) {
			continue
		}
		out = append(out, Entry{Step: step, Path: filepath.Join(root, de.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// Rejected is a checkpoint passed over by Latest, and why.
type Rejected struct {
	Entry Entry
	Err   error
}

// Latest returns the newest checkpoint that verifies, with at most step
// maxStep (maxStep < 0: no bound), and the newer ones it rejected.
// found is false when none verifies.
func Latest(root string, maxStep int64) (e Entry, m Manifest, rejected []Rejected, found bool, err error) {
	return LatestFS(store.OS, root, maxStep)
}

// LatestFS is Latest reading through fs.
func LatestFS(fs store.FS, root string, maxStep int64) (e Entry, m Manifest, rejected []Rejected, found bool, err error) {
	all, err := ListFS(fs, root)
	if err != nil {
		return e, m, nil, false, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if maxStep >= 0 && all[i].Step > maxStep {
			continue
		}
		mf, _, verr := VerifyFS(fs, all[i].Path)
		if verr != nil {
			rejected = append(rejected, Rejected{Entry: all[i], Err: verr})
			continue
		}
		return all[i], mf, rejected, true, nil
	}
	return e, m, rejected, false, nil
}

// Retain removes checkpoints that no rule keeps: the newest always, the last
// keepLast, and the keepTop best by manifest metric (higher or lower is
// better). Checkpoints whose manifest cannot be read count as metric-less.
func Retain(root string, keepLast, keepTop int, higherIsBetter bool) (removed []Entry, err error) {
	return RetainFS(store.OS, root, keepLast, keepTop, higherIsBetter)
}

// RetainFS is Retain reading and removing through fs.
func RetainFS(fs store.FS, root string, keepLast, keepTop int, higherIsBetter bool) (removed []Entry, err error) {
	all, err := ListFS(fs, root)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	keep := map[int64]bool{all[len(all)-1].Step: true}
	for i := len(all) - 1; i >= 0 && i >= len(all)-keepLast; i-- {
		keep[all[i].Step] = true
	}
	if keepTop > 0 {
		type scored struct {
			step int64
			v    float64
		}
		var ss []scored
		for _, e := range all {
			mb, err := store.ReadFile(fs, filepath.Join(e.Path, ManifestName))
			if err != nil {
				continue
			}
			var m Manifest
			if json.Unmarshal(mb, &m) != nil || m.Metric == nil {
				continue
			}
			ss = append(ss, scored{e.Step, *m.Metric})
		}
		sort.SliceStable(ss, func(i, j int) bool {
			if higherIsBetter {
				return ss[i].v > ss[j].v
			}
			return ss[i].v < ss[j].v
		})
		for i := 0; i < len(ss) && i < keepTop; i++ {
			keep[ss[i].step] = true
		}
	}
	for _, e := range all {
		if keep[e.Step] {
			continue
		}
		if err := fs.RemoveAll(e.Path); err != nil {
			return removed, fmt.Errorf("ckpt: removing %s: %w", e.Path, err)
		}
		removed = append(removed, e)
	}
	return removed, nil
}
