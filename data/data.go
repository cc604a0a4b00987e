// Package data holds the prompt datasets and the resumable cursor that
// admits each prompt exactly once per epoch in a seeded order.
package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Prompt is one dataset row. Task is environment-specific JSON that the
// environment decodes; treat it as read-only (datasets share it).
type Prompt struct {
	ID   string
	Task json.RawMessage
}

// Dataset is an indexed, immutable list of prompts. Prompt(i) must return
// the same prompt for the same i for the life of a run: the run log stores
// cursors, not prompts, and resume re-reads them.
type Dataset interface {
	Len() int
	Prompt(i int) (Prompt, error)
}

// ErrIndex is matched by the error of Prompt for an index out of range.
var ErrIndex = errors.New("prompt index out of range")

// JSONL is a dataset read whole from a JSON Lines file.
type JSONL struct {
	name    string
	prompts []Prompt
}

// ReadJSONL reads the JSONL dataset at path; see ParseJSONL.
func ReadJSONL(path string) (*JSONL, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	defer f.Close()
	return ParseJSONL(path, f)
}

// ParseJSONL reads a dataset of one JSON object per line,
// {"id": "...", "task": {...}}; name is used in errors. Blank lines are
// skipped, and a UTF-8 byte order mark at the start of the file (which
// some editors write) is ignored. A malformed line, a missing or empty id,
// a missing task, an unknown field or a duplicate id is an error naming
// the file and line.
func ParseJSONL(name string, r io.Reader) (*JSONL, error) {
	ds := &JSONL{name: name}
	firstLine := map[string]int{} // id -> line, to name both lines of a duplicate
	br := bufio.NewReader(r)
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: read: %w", name, line, err)
		}
		if line == 1 {
			var berr error
			if text, berr = stripBOM(name, text); berr != nil {
				return nil, berr
			}
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			p, perr := parseLine(t)
			if perr != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, perr)
			}
			if prev, dup := firstLine[p.ID]; dup {
				return nil, fmt.Errorf("%s:%d: duplicate id %q (first at line %d)", name, line, p.ID, prev)
			}
			firstLine[p.ID] = line
			ds.prompts = append(ds.prompts, p)
		}
		if errors.Is(err, io.EOF) {
			return ds, nil
		}
	}
}

// stripBOM drops a UTF-8 byte order mark from the first line and refuses
// a UTF-16 one by name (JSON Lines is UTF-8).
func stripBOM(name string, first []byte) ([]byte, error) {
	if b, ok := bytes.CutPrefix(first, []byte("\xef\xbb\xbf")); ok {
		return b, nil
	}
	if bytes.HasPrefix(first, []byte("\xff\xfe")) || bytes.HasPrefix(first, []byte("\xfe\xff")) {
		return nil, fmt.Errorf("%s:1: the file starts with a UTF-16 byte order mark; JSON Lines must be UTF-8", name)
	}
	return first, nil
}

func parseLine(b []byte) (Prompt, error) {
	var row struct {
		ID   *string         `json:"id"`
		Task json.RawMessage `json:"task"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // extra fields belong inside "task"
	if err := dec.Decode(&row); err != nil {
		return Prompt{}, fmt.Errorf("bad row: %w", err)
	}
	if dec.More() {
		return Prompt{}, errors.New("bad row: more than one JSON value on the line")
	}
	if row.ID == nil || *row.ID == "" {
		return Prompt{}, errors.New(`bad row: missing "id"`)
	}
	if len(row.Task) == 0 || string(row.Task) == "null" {
		return Prompt{}, fmt.Errorf(`bad row %q: missing "task"`, *row.ID)
	}
	return Prompt{ID: *row.ID, Task: row.Task}, nil
}

// Len is the number of prompts.
func (d *JSONL) Len() int { return len(d.prompts) }

// Prompt returns prompt i.
func (d *JSONL) Prompt(i int) (Prompt, error) {
	if i < 0 || i >= len(d.prompts) {
		return Prompt{}, fmt.Errorf("%s: %w: %d of %d", d.name, ErrIndex, i, len(d.prompts))
	}
	return d.prompts[i], nil
}

// Generated is a dataset whose prompts a function makes on demand, e.g. a
// built-in environment's task generator.
type Generated struct {
	n  int
	fn func(i int) (Prompt, error)
}

// NewGenerated returns a dataset of n prompts, prompt i being fn(i). fn
// must be pure (the same i gives the same prompt, with a unique id), since
// resume calls it again for the same indices.
func NewGenerated(n int, fn func(i int) (Prompt, error)) *Generated {
	return &Generated{n: max(n, 0), fn: fn}
}

// Len is the number of prompts.
func (g *Generated) Len() int { return g.n }

// Prompt returns fn(i).
func (g *Generated) Prompt(i int) (Prompt, error) {
	if i < 0 || i >= g.n {
		return Prompt{}, fmt.Errorf("generated: %w: %d of %d", ErrIndex, i, g.n)
	}
	p, err := g.fn(i)
	if err != nil {
		return Prompt{}, fmt.Errorf("generate prompt %d: %w", i, err)
	}
	return p, nil
}
