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

// A bad line that is not the last one is not a torn tail: it is reported,
// not cut (cutting would lose the rows after it).
func TestWriterRefusesBadMiddleLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	os.WriteFile(p, []byte("{\"step\":1}\n{oops\n{\"step\":3}\n"), 0o644)
	if _, err := Create(p); err == nil || !strings.Contains(err.Error(), "m.jsonl:2") {
		t.Fatalf("err = %v, want file:line", err)
	}
}
