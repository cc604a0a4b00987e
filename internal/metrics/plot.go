package metrics

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Plot draws success rate and mean reward against step into a PNG (or SVG
// or PDF, by the extension of path).
func Plot(steps []Step, title, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "rate"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	series := []struct {
		name string
		get  func(Step) float64
		c    color.RGBA
	}{
		{"success rate", func(s Step) float64 { return s.SuccessRate }, color.RGBA{R: 200, A: 255}},
		{"reward mean", func(s Step) float64 { return s.RewardMean }, color.RGBA{B: 200, A: 255}},
		{"compacted fraction", func(s Step) float64 { return s.CompactedFraction }, color.RGBA{G: 140, A: 255}},
	}
	for _, se := range series {
		pts := make(plotter.XYs, len(steps))
		for i, s := range steps {
			pts[i].X, pts[i].Y = float64(s.Step), se.get(s)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("metrics: plot: %w", err)
		}
		l.Color = se.c
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(se.name, l)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("metrics: plot %s: %w", path, err)
	}
	return nil
}
