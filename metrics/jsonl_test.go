package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lines(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// A rewound step replaces its row and every later one: the file itself,
// not just Read, holds each step once.
func TestWriterReplacesRewoundSteps(t *testing.T) {
	p := filepath.Join(t.TempDir(), "metrics.jsonl")
	w, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 4; i++ {
		if err := w.Write(Step{Step: i, Loss: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	w, err = Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// resumed from a checkpoint at step 2: steps 3 and 4 are trained again
	w.Write(Step{Step: 3, Loss: 30})
	w.Write(Step{Step: 4, Loss: 40})
	w.Write(Step{Step: 5, Loss: 50})
	w.Close()
	got := lines(t, p)
	if len(got) != 5 {
		t.Fatalf("file has %d rows, want 5:\n%s", len(got), strings.Join(got, "\n"))
	}
	steps, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 2, 30, 40, 50}
	for i, s := range steps {
		if s.Step != int64(i+1) || s.Loss != want[i] {
			t.Fatalf("row %d = step %d loss %v, want step %d loss %v", i, s.Step, s.Loss, i+1, want[i])
		}
	}
}

// A torn last line (a kill mid-write) is cut when the file is opened again,
// and Read skips it before that.
func TestWriterRepairsTornTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "metrics.jsonl")
	os.WriteFile(p, []byte("{\"step\":1}\n{\"step\":2}\n{\"step\":3,\"lo"), 0o644)
	steps, err := Read(p)
	if err != nil || len(steps) != 2 {
		t.Fatalf("Read of a torn file: %d steps, err %v", len(steps), err)
	}
	w, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if w.Repaired == 0 {
		t.Fatal("Repaired = 0 for a torn tail")
	}
	if fi, _ := os.Stat(p); fi.Size() != int64(len("{\"step\":1}\n{\"step\":2}\n")) {
		t.Fatalf("file is %d bytes after repair, want the two whole rows", fi.Size())
	}
	if err := w.Write(Step{Step: 3}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got := lines(t, p); len(got) != 3 || got[2] != `{"step":3,`+got[2][len(`{"step":3,`):] {
		t.Fatalf("rows after repair: %q", got)
	}
	if _, err := Read(p); err != nil {
		t.Fatal(err)
	}
}

// A bad line that is not the last one is not a torn tail, and cutting
// there would lose the rows after it. The file is a view, so it is set
// aside whole (nothing lost) and rebuilt from its readable rows; the run
// goes on writing. On main, Create refused and the resume stopped.
func TestWriterSetsDamagedFileAside(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	orig := "{\"step\":1}\n{oops\n{\"step\":2}\n\x00\x00garbage\n{\"step\":3}\n{\"step\":2,\"loss\":20}\n{\"step\":3,\"lo"
	os.WriteFile(p, []byte(orig), 0o644)
	w, err := Create(p)
	if err != nil {
		t.Fatalf("Create over a damaged middle line: %v", err)
	}
	if w.SetAside != p+".damaged" || len(w.Dropped) != 3 || w.Dropped[0] != 2 || w.Dropped[1] != 4 || w.Dropped[2] != 7 {
		t.Fatalf("set aside %q, dropped lines %v; want %s.damaged and lines 2, 4, 7", w.SetAside, w.Dropped, p)
	}
	if b, _ := os.ReadFile(w.SetAside); string(b) != orig {
		t.Fatalf("the copy set aside is not the original:\n%q", b)
	}
	if err := w.Write(Step{Step: 3, Loss: 3}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	steps, err := Read(p)
	if err != nil || len(steps) != 3 || steps[1].Loss != 20 || steps[2].Loss != 3 {
		t.Fatalf("rebuilt file: %+v, %v; want steps 1, 2 (the rewritten row), 3", steps, err)
	}
	os.WriteFile(p, []byte("{\"step\":1}\n}\n{\"step\":2}\n"), 0o644)
	if w, err := Create(p); err != nil || w.SetAside != p+".damaged.1" {
		t.Fatalf("a second damaged file: %v, set aside %q; want a new name", err, w.SetAside)
	}
}
