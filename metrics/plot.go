package metrics

import (
	"fmt"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Run is one run's rows under a name, for Plot and Compare.
type Run struct {
	Name  string
	Steps []Step
}

type series struct {
	name string
	get  func(Step) float64
}

// panels are the learning curve's tiles: a title, a y label and up to
// three series.
var panels = []struct {
	title, ylabel string
	series        []series
}{
	{"Success and reward", "rate / reward", []series{
		{"success rate", func(s Step) float64 { return s.SuccessRate }},
		{"reward mean", func(s Step) float64 { return s.RewardMean }}}},
	{"Loss and gradient norm", "value", []series{
		{"loss", func(s Step) float64 { return s.Loss }},
		{"grad norm", func(s Step) float64 { return s.GradNorm }}}},
	{"Policy entropy and KL", "nats", []series{
		{"entropy", func(s Step) float64 { return s.Entropy }},
		{"KL to sampler", func(s Step) float64 { return s.KLSampler }},
		{"KL to reference", func(s Step) float64 { return s.KLRef }}}},
	{"Compaction", "per rollout", []series{
		{"compactions", func(s Step) float64 { return s.CompactionsPerRollout }},
		{"segments", func(s Step) float64 { return s.SegmentsPerRollout }}}},
	{"Generation throughput", "tokens / s", []series{
		{"gen tokens/s", func(s Step) float64 { return s.GenTokensPerSecond }}}},
	{"Clipping and trainer-sampler mismatch", "fraction / nats", []series{
		{"clip low", func(s Step) float64 { return s.ClipLowFrac }},
		{"clip high", func(s Step) float64 { return s.ClipHighFrac }},
		{"mean |Δ logprob|", func(s Step) float64 { return s.LogprobAbsDiff }}}},
}

var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, {R: 0xd6, G: 0x27, B: 0x28, A: 255}, {R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 255}, {R: 0x94, G: 0x67, B: 0xbd, A: 255}, {R: 0x8c, G: 0x56, B: 0x4b, A: 255},
}

// smooth is TensorBoard's debiased exponential moving average.
func smooth(ys []float64, weight float64) []float64 {
	out := make([]float64, len(ys))
	var last float64
	for i, y := range ys {
		last = last*weight + (1-weight)*y
		out[i] = last / (1 - pow(weight, i+1))
	}
	return out
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}

// Plot draws one run's learning curve: each panel's series raw (thin,
// light) under a smoothed line, legends beside the panels.
func Plot(steps []Step, title, path string) error {
	return draw6(title, path, []Run{{Name: "", Steps: steps}})
}

// Compare overlays runs (the smoothed lines; one colour per run, one dash
// pattern per series).
func Compare(runs []Run, path string) error {
	return draw6("longhaul: "+strings.Join(names(runs), " vs "), path, runs)
}

func names(runs []Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Name
	}
	return out
}

var dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}

func draw6(title, path string, runs []Run) error {
	const cols, rows = 2, 3
	w, h := 13*vg.Inch, 10*vg.Inch
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	var cw vg.CanvasWriterTo
	var img *vgimg.Canvas
	if format == "png" {
		// encoded below at BestSpeed: the default deflate level costs
		// most of the plot's time (and far more under -race, where every
		// test run that finishes a run draws one)
		img = vgimg.New(w, h)
		cw = vgimg.PngCanvas{Canvas: img}
	} else {
		var err error
		if cw, err = draw.NewFormattedCanvas(w, h, format); err != nil {
			return fmt.Errorf("metrics: plot %s: %w", path, err)
		}
	}
	dc := draw.New(cw)
	// white background, then the figure title above the tiles
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	head := plot.New()
	head.Title.Text = title
	head.Title.TextStyle.Font.Size = vg.Points(16)
	sty := head.Title.TextStyle
	dc.FillText(sty, vg.Point{X: w / 2, Y: h - vg.Points(10)}, title)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadTop: vg.Points(34), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(8), PadX: vg.Points(16), PadY: vg.Points(16)}
	legendW := vg.Points(150)
	compare := len(runs) > 1
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font.Size = vg.Points(13)
		p.X.Label.Text, p.Y.Label.Text = "step", pn.ylabel
		for _, ax := range []*plot.Axis{&p.X, &p.Y} {
			ax.Label.TextStyle.Font.Size = vg.Points(11)
			ax.Tick.Label.Font.Size = vg.Points(10)
		}
		p.Add(plotter.NewGrid())
		leg := plot.NewLegend()
		leg.TextStyle.Font.Size = vg.Points(10)
		leg.Top, leg.Left = true, true
		for ri, run := range runs {
			if len(run.Steps) == 0 {
				continue
			}
			for si, se := range pn.series {
				xs := make([]float64, len(run.Steps))
				ys := make([]float64, len(run.Steps))
				for k, s := range run.Steps {
					xs[k], ys[k] = float64(s.Step), se.get(s)
				}
				c := palette[si%len(palette)]
				name := se.name
				if compare {
					c, name = palette[ri%len(palette)], run.Name+": "+se.name
				}
				if !compare {
					raw, err := line(xs, ys)
					if err != nil {
						return err
					}
					raw.Color = color.NRGBA{c.R, c.G, c.B, 90} // not premultiplied: a light shade of the same hue
					raw.Width = vg.Points(1)
					p.Add(raw)
				}
				sm, err := line(xs, smooth(ys, 0.8))
				if err != nil {
					return err
				}
				sm.Color, sm.Width = c, vg.Points(2)
				if compare {
					sm.Dashes = dashes[si%len(dashes)]
				}
				p.Add(sm)
				leg.Add(name, sm)
			}
		}
		cell := tiles.At(dc, i%cols, i/cols)
		plotArea := draw.Crop(cell, 0, -legendW, 0, 0)
		legArea := draw.Crop(cell, cell.Max.X-cell.Min.X-legendW+vg.Points(8), 0, 0, -vg.Points(24))
		p.Draw(plotArea)
		leg.Draw(legArea)
	}
	// Raw: a picture drawn from metrics.jsonl at the end of a run (or by
	// `longhaul plot`), never read back by a resume; a mirrored run
	// directory ships it like any file written outside the seam.
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("metrics: plot: %w", err)
	}
	if img != nil {
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		err = enc.Encode(f, img.Image())
	} else {
		_, err = cw.WriteTo(f)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("metrics: plot %s: %w", path, err)
	}
	return f.Close()
}

func line(xs, ys []float64) (*plotter.Line, error) {
	pts := make(plotter.XYs, len(xs))
	for i := range xs {
		pts[i].X, pts[i].Y = xs[i], ys[i]
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, fmt.Errorf("metrics: plot: %w", err)
	}
	return l, nil
}
