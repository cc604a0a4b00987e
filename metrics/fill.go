package metrics

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/store"
)

// Missing returns the steps of trained that the file holds no row for, in
// order.
func (w *Writer) Missing(trained []int64) []int64 {
	var out []int64
	for _, k := range trained {
		if !slices.ContainsFunc(w.rows, func(r rowPos) bool { return r.step == k }) {
			out = append(out, k)
		}
	}
	return out
}

// Fill puts rows for steps the file lacks in their place among the rows
// it holds (a step it holds is left as it is): the file is written anew
// beside the old one, synced, and renamed over it, so a crash leaves one
// of the two whole.
func (w *Writer) Fill(rows []Step) error {
	path := w.path
	b, err := store.ReadFile(w.fs, path)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	var lines [][]byte
	var steps []int64
	for i, r := range w.rows {
		end := w.end
		if i+1 < len(w.rows) {
			end = w.rows[i+1].off
		}
		lines, steps = append(lines, b[r.off:end]), append(steps, r.step)
	}
	for _, s := range rows {
		i, found := slices.BinarySearch(steps, s.Step)
		if found {
			continue
		}
		line, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		lines = slices.Insert(lines, i, append(line, '\n'))
		steps = slices.Insert(steps, i, s.Step)
	}
	var out []byte
	for _, l := range lines {
		out = append(out, l...)
	}
	if err := store.WriteAtomic(w.fs, path, out); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	nw, err := open(w.fs, path)
	if err != nil {
		return err
	}
	w.f.Close()
	w.f, w.rows, w.end = nw.f, nw.rows, nw.end
	return nil
}
