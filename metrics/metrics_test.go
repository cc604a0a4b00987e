package metrics

import (
	"image/png"
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
	checkPNG(t, png)
	cmp := filepath.Join(dir, "compare.png")
	if err := Compare([]Run{{"a", got}, {"b", got[:2]}}, cmp); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, cmp)
}

// checkPNG decodes the image and checks it is the figure's size and not
// blank: at least one pixel of each series colour family is drawn.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 800 {
		t.Fatalf("%s is %dx%d", path, b.Dx(), b.Dy())
	}
	colours := map[[3]uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
		}
	}
	for _, want := range [][3]uint32{{0x1f, 0x77, 0xb4}, {0xd6, 0x27, 0x28}} {
		if !colours[want] {
			t.Errorf("%s: no pixel of colour %x", path, want)
		}
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
