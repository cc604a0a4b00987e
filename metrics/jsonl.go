package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/store"
)

// Writer appends steps to a metrics.jsonl file, one row per step.
//
// The file is a cache of what the run log and the trainer said, so it
// follows them across crashes: a torn last line (a process killed
// mid-write) is cut off when the file is opened, and a step written again
// after a resume rewound training replaces its old row and every later one,
// so the file never holds a step twice.
type Writer struct {
	fs   store.FS
	path string
	f    store.File // opened for appending
	rows []rowPos   // the rows in the file, in order
	end  int64
	// Repaired says what Create cut from a torn tail (0: nothing).
	Repaired int64
	// SetAside is where Create moved a file with unreadable lines before
	// the last (empty: none); Dropped lists those lines (1-based). The file
	// was rebuilt from its readable rows.
	SetAside string
	Dropped  []int
}

type rowPos struct {
	step int64
	off  int64
}

// Create opens path for writing rows, creating it or continuing it (a
// resumed run). A torn or unparsable last line is truncated. An unparsable
// line before the last is damage, not a tail (cutting there would lose the
// rows after it): the file is a view, so it is moved aside whole (SetAside,
// Dropped) and rebuilt from its readable rows, and the run goes on.
func Create(path string) (*Writer, error) { return CreateFS(store.OS, path) }

// CreateFS is Create through the storage seam fs.
func CreateFS(fs store.FS, path string) (*Writer, error) {
	w, err := open(fs, path)
	var bad *badLinesError
	if !errors.As(err, &bad) {
		return w, err
	}
	aside, dropped, err := rebuild(fs, path)
	if err != nil {
		return nil, err
	}
	if w, err = open(fs, path); err != nil {
		return nil, err
	}
	w.SetAside, w.Dropped = aside, dropped
	return w, nil
}

func open(fs store.FS, path string) (*Writer, error) {
	b, err := store.ReadFile(fs, path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	w := &Writer{fs: fs, path: path}
	if err := w.scan(path, b); err != nil {
		return nil, err
	}
	if w.f, err = fs.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return w, nil
}

// badLinesError is a line before the last that is not a row.
type badLinesError struct {
	path string
	line int
}

func (e *badLinesError) Error() string {
	return fmt.Sprintf("metrics: %s:%d: not a JSON row", e.path, e.line)
}

// rebuild moves the file at path aside (to path.damaged, or .damaged.N
// when that exists) and writes path anew with its readable rows, each
// step once (a step written again after a rewind replaces its old row and
// the later ones, as Write does). It returns where the original went and
// the lines it dropped.
func rebuild(fs store.FS, path string) (string, []int, error) {
	b, err := store.ReadFile(fs, path)
	if err != nil {
		return "", nil, fmt.Errorf("metrics: %w", err)
	}
	type row struct {
		step int64
		line []byte
	}
	var rows []row
	var dropped []int
	for n, line := range bytes.SplitAfter(b, []byte("\n")) {
		text := bytes.TrimSpace(line)
		if len(text) == 0 {
			continue
		}
		var s Step
		if !bytes.HasSuffix(line, []byte("\n")) || json.Unmarshal(text, &s) != nil {
			dropped = append(dropped, n+1)
			continue
		}
		cut := len(rows)
		for cut > 0 && rows[cut-1].step >= s.Step {
			cut--
		}
		rows = append(rows[:cut], row{s.Step, append(text, '\n')})
	}
	aside := path + ".damaged"
	for i := 1; ; i++ {
		if _, err := fs.Stat(aside); errors.Is(err, os.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s.damaged.%d", path, i)
	}
	var out []byte
	for _, r := range rows {
		out = append(out, r.line...)
	}
	tmp := path + ".tmp"
	if err := store.WriteFile(fs, tmp, out); err != nil {
		return "", nil, fmt.Errorf("metrics: %w", err)
	}
	// The original goes aside first: a crash between the renames leaves
	// no metrics.jsonl (the next open starts it empty), never a lost copy.
	if err := fs.Rename(path, aside); err != nil {
		return "", nil, fmt.Errorf("metrics: setting %s aside: %w", path, err)
	}
	if err := fs.Rename(tmp, path); err != nil {
		return "", nil, fmt.Errorf("metrics: %w", err)
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		return "", nil, fmt.Errorf("metrics: %w", err)
	}
	return aside, dropped, nil
}

func (w *Writer) scan(path string, b []byte) error {
	var off int64
	for line := 1; len(b) > 0; line++ {
		i := bytes.IndexByte(b, '\n')
		whole := i >= 0
		if !whole {
			i = len(b)
		}
		text := bytes.TrimSpace(b[:i])
		var s Step
		bad := len(text) > 0 && json.Unmarshal(text, &s) != nil
		if !whole || bad {
			// Only the last line may be torn: what follows a bad line in
			// the middle is not a tail, and cutting it would lose rows.
			if whole && len(bytes.TrimSpace(b[i+1:])) > 0 {
				return &badLinesError{path, line}
			}
			w.Repaired = int64(len(b))
			break
		}
		if len(text) > 0 {
			w.rows = append(w.rows, rowPos{s.Step, off})
		}
		off += int64(i + 1)
		b = b[i+1:]
	}
	w.end = off
	if w.Repaired > 0 {
		if err := w.fs.Truncate(path, off); err != nil {
			return fmt.Errorf("metrics: %s: cutting a torn tail: %w", path, err)
		}
	}
	return nil
}

// Write appends one step as a JSON line, first cutting the rows of this
// step and later ones (a rewound step replaces its old row), and fsyncs,
// so a checkpoint taken after it never covers a step whose row is lost.
func (w *Writer) Write(s Step) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	cut := len(w.rows)
	for cut > 0 && w.rows[cut-1].step >= s.Step {
		cut--
	}
	if cut < len(w.rows) {
		w.end = w.rows[cut].off
		w.rows = w.rows[:cut]
		if err := w.fs.Truncate(w.path, w.end); err != nil {
			return fmt.Errorf("metrics: rewinding to step %d: %w", s.Step, err)
		}
	}
	b = append(b, '\n')
	if _, err := w.f.Write(b); err != nil { // O_APPEND: at w.end
		return fmt.Errorf("metrics: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	w.rows = append(w.rows, rowPos{s.Step, w.end})
	w.end += int64(len(b))
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Read parses a metrics.jsonl file into one entry per step, in step order.
// Files written before rows were replaced in place may hold a step twice;
// the later line wins. A torn last line (a run killed mid-write, not yet
// resumed) is skipped.
func Read(path string) ([]Step, error) {
	// Raw: a reader of a finished or running run's local file (plots,
	// summaries); the writer goes through the seam (CreateFS).
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer f.Close()
	return parse(path, f)
}

func parse(name string, r io.Reader) ([]Step, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	byStep := map[int64]int{}
	var out []Step
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("metrics: %s: %w", name, err)
		}
		torn := errors.Is(err, io.EOF)
		if t := bytes.TrimSpace(b); len(t) > 0 {
			var s Step
			if jerr := json.Unmarshal(t, &s); jerr != nil {
				if torn {
					break
				}
				return nil, fmt.Errorf("metrics: %s:%d: %w", name, line, jerr)
			}
			if i, ok := byStep[s.Step]; ok {
				out = append(out[:i], s) // a rewind: this step and later ones again
				for k, v := range byStep {
					if v > i {
						delete(byStep, k)
					}
				}
			} else {
				byStep[s.Step] = len(out)
				out = append(out, s)
			}
		}
		if torn {
			break
		}
	}
	return out, nil
}
