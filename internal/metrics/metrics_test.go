package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReadResumeAndPlot(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "metrics.jsonl")
	w, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Step{{Step: 1, SuccessRate: 0.1}, {Step: 2, SuccessRate: 0.2}, {Step: 3, SuccessRate: 0.3}} {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	// A resume from step 1 writes steps 2 and 3 again.
	w, _ = Create(p)
	w.Write(Step{Step: 2, SuccessRate: 0.25})
	w.Write(Step{Step: 3, SuccessRate: 0.35})
	w.Write(Step{Step: 4, SuccessRate: 0.45})
	w.Close()
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.1, 0.25, 0.35, 0.45}
	if len(got) != len(want) {
		t.Fatalf("got %d steps, want %d", len(got), len(want))
	}
	for i, s := range got {
		if s.Step != int64(i+1) || s.SuccessRate != want[i] {
			t.Fatalf("step %d = %+v, want success %v", i+1, s, want[i])
		}
	}
	png := filepath.Join(dir, "curve.png")
	if err := Plot(got, "test", png); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(png)
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("plot: %d bytes, err %v", len(b), err)
	}
}

func TestReadNamesBadLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	os.WriteFile(p, []byte("{\"step\":1}\n{oops\n"), 0o644)
	_, err := Read(p)
	if err == nil || !strings.Contains(err.Error(), "m.jsonl:2") {
		t.Fatalf("err = %v, want file:line", err)
	}
}
