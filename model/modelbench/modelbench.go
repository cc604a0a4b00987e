// Package modelbench measures the engine on a model directory against the
// machine's own limits, measured in the same run: loading against the time
// to read the file, steady-state decode against the 2-core DRAM read rate
// divided by the weight bytes a token reads, batch 16 against batch 1, and
// a 512-token prefill against the 2-core FMA peak (`longhaul bench
// model`).
package modelbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/kern"
	"github.com/longhaul-rl/longhaul/model/kern/kernbench"
)

// Options tune Run.
type Options struct {
	Reps       int  // repetitions of each timing (the median is reported); default 3
	NewTokens  int  // decode steps timed after warm-up; default 128
	Warm       int  // decode steps before the timed ones; default 16
	Prefill    int  // prompt tokens of the prefill timing; default 512
	StreamMiB  int  // buffer of the read-rate measurement; default 1024
	Batch      int  // the batched decode's rows; default 16
	SkipF32    bool // do not also time a float32 copy of a BF16 checkpoint
	SkipLoad   bool // do not time loading against reading
	Log        io.Writer
	PeakSecond time.Duration // FMA peak timing; default 1 s
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Reps, 3)
	def(&o.NewTokens, 128)
	def(&o.Warm, 16)
	def(&o.Prefill, 512)
	def(&o.StreamMiB, 1024)
	def(&o.Batch, 16)
	if o.PeakSecond <= 0 {
		o.PeakSecond = time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Decode is one dtype's figures.
type Decode struct {
	DType         string
	BytesPerToken int64   // weight bytes a decode step reads
	Batch1        float64 // steady-state tok/s, batch 1
	BatchN        float64 // steady-state tok/s, Options.Batch rows
	PrefillGFLOPs float64 // the prefill's GFLOP/s
	PrefillSecs   float64
}

// Report is Run's result.
type Report struct {
	Path             string
	Params           int
	FileBytes        int64
	LoadAvgBefore    string
	LoadAvgAfter     string
	ReadGBs          float64 // 2-core streaming read rate
	PeakGFLOPs       float64 // 2-core FMA peak
	FileReadSecs     float64 // reading the weight files (page cache warm)
	LoadSecs         float64 // model.LoadDir
	PeakRSSBytes     int64   // after loading and serving batch 1
	Decodes          []Decode
	Batch, NewTokens int
}

// Run measures the model directory dir.
func Run(ctx context.Context, dir string, o Options) (Report, error) {
	o.defaults()
	rep := Report{Path: dir, LoadAvgBefore: kernbench.LoadAvg(), Batch: o.Batch, NewTokens: o.NewTokens}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			rep.FileBytes += fi.Size()
		}
	}
	// serving first: the peak RSS is read before any other allocation
	// (the read-rate buffer, the loads timed below, a float32 copy)
	m, err := model.LoadDir(dir)
	if err != nil {
		return rep, err
	}
	rep.Params = m.NumParams()
	d, err := decode(ctx, m, o, true)
	if err != nil {
		return rep, err
	}
	rep.PeakRSSBytes = d.rss
	rep.Decodes = append(rep.Decodes, d.Decode)
	fmt.Fprintf(o.Log, "measuring the read rate and FMA peak\n")
	rep.ReadGBs = kernbench.ReadRate2(o.StreamMiB<<20, o.Reps, time.Second)
	rep.PeakGFLOPs = kernbench.Peak(2, o.PeakSecond)
	if !o.SkipLoad {
		if rep.FileReadSecs, rep.LoadSecs, err = timeLoad(dir, files, o.Reps); err != nil {
			return rep, err
		}
	}
	if m.DType() != "F32" && !o.SkipF32 {
		f32, err := model.LoadDirWith(dir, model.LoadOptions{Copy: true})
		if err != nil {
			return rep, err
		}
		m = nil
		d, err := decode(ctx, f32, o, false)
		if err != nil {
			return rep, err
		}
		rep.Decodes = append(rep.Decodes, d.Decode)
	}
	rep.LoadAvgAfter = kernbench.LoadAvg()
	return rep, nil
}

// timeLoad returns the median time to read the weight files (their pages
// cached by a first read) and to load the directory.
func timeLoad(dir string, files []string, reps int) (read, load float64, err error) {
	readAll := func() error {
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, fh)
			fh.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := readAll(); err != nil {
		return 0, 0, err
	}
	var rs, ls []float64
	for range reps {
		t0 := time.Now()
		if err := readAll(); err != nil {
			return 0, 0, err
		}
		rs = append(rs, time.Since(t0).Seconds())
		t0 = time.Now()
		m, err := model.LoadDir(dir)
		if err != nil {
			return 0, 0, err
		}
		ls = append(ls, time.Since(t0).Seconds())
		_ = m.NumParams()
	}
	return median(rs), median(ls), nil
}

type decodeResult struct {
	Decode
	rss int64
}

// decode times m's steady-state decode (batch 1 and o.Batch) and prefill.
func decode(ctx context.Context, m *model.Model, o Options, rss bool) (decodeResult, error) {
	c := m.Config()
	res := decodeResult{Decode: Decode{DType: m.DType(), BytesPerToken: streamedBytes(m)}}
	r := rand.New(rand.NewPCG(1, 2))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(r.IntN(c.Vocab))
		}
		return p
	}
	// steady state: the time of warm+new tokens minus that of warm tokens
	// (the same prompts and seeds): prefill and set-up cancel out
	rate := func(batch int) (float64, error) {
		reqs := make([]model.SampleRequest, batch)
		for i := range reqs {
			reqs[i] = model.SampleRequest{Prompt: prompt(8), Temperature: 1, Seed: uint64(i + 1)}
		}
		run := func(n int) (float64, error) {
			for i := range reqs {
				reqs[i].MaxTokens = n
			}
			t0 := time.Now()
			out, err := m.Generate(ctx, reqs)
			if err != nil {
				return 0, err
			}
			for _, o := range out {
				if len(o.Tokens) != n {
					return 0, fmt.Errorf("modelbench: a request sampled %d of %d tokens", len(o.Tokens), n)
				}
			}
			return time.Since(t0).Seconds(), nil
		}
		var rates []float64
		if _, err := run(o.Warm); err != nil { // first call: caches, pools
			return 0, err
		}
		for range o.Reps {
			short, err := run(o.Warm)
			if err != nil {
				return 0, err
			}
			long, err := run(o.Warm + o.NewTokens)
			if err != nil {
				return 0, err
			}
			rates = append(rates, float64(batch*o.NewTokens)/max(long-short, 1e-9))
		}
		return median(rates), nil
	}
	var err error
	fmt.Fprintf(o.Log, "%s: batch 1\n", res.DType)
	if res.Batch1, err = rate(1); err != nil {
		return res, err
	}
	if rss {
		res.rss = maxRSS()
	}
	fmt.Fprintf(o.Log, "%s: batch %d\n", res.DType, o.Batch)
	if res.BatchN, err = rate(o.Batch); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Log, "%s: prefill %d\n", res.DType, o.Prefill)
	n := min(o.Prefill, m.Context()-1)
	p := prompt(n)
	var ts []float64
	for range o.Reps + 1 {
		t0 := time.Now()
		if _, err := m.Generate(ctx, []model.SampleRequest{{Prompt: p, MaxTokens: 1, Temperature: 1, Seed: 9}}); err != nil {
			return res, err
		}
		ts = append(ts, time.Since(t0).Seconds())
	}
	res.PrefillSecs = median(ts[1:])
	res.PrefillGFLOPs = prefillFLOPs(c, n) / res.PrefillSecs / 1e9
	return res, nil
}

// streamedBytes is what a decode step reads of the weights: all of them,
// less the embedding of an untied model (one row a token).
func streamedBytes(m *model.Model) int64 {
	b := m.ResidentBytes()
	if c := m.Config(); !c.Tied {
		es := int64(4)
		if m.DType() == "BF16" {
			es = 2
		}
		b -= es * int64(c.Vocab) * int64(c.Dim)
	}
	return b
}

// prefillFLOPs counts the multiply-adds (×2) of an n-token prefill: the
// projections and the MLP of every row, causal attention, and the head of
// the last row.
func prefillFLOPs(c model.Config, n int) float64 {
	d, q, kv, f := float64(c.Dim), float64(c.Heads*c.HeadDim), float64(c.KVHeads*c.HeadDim), float64(c.Hidden)
	N := float64(n)
	perRow := d*(q+2*kv) + q*d + 3*d*f
	attn := 2 * float64(c.Heads*c.HeadDim) * N * (N + 1) / 2
	return 2 * (float64(c.Layers)*(N*perRow+attn) + d*float64(c.Vocab))
}

func maxRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Maxrss << 10
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(x))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Print writes the report: each figure with its limit and share.
func Print(w io.Writer, r Report) {
	fmt.Fprintf(w, "model %s: %d parameters, %.2f GB of weight files; kernel path %s; load average %s before, %s after\n",
		r.Path, r.Params, float64(r.FileBytes)/1e9, kern.SIMDPath(), r.LoadAvgBefore, r.LoadAvgAfter)
	fmt.Fprintf(w, "machine: 2-core streaming read %.1f GB/s, 2-core FMA peak %.1f GFLOP/s\n", r.ReadGBs, r.PeakGFLOPs)
	if r.LoadSecs > 0 {
		fmt.Fprintf(w, "load: %.3f s against %.3f s to read the files (%.2f×, target ≤ 2×)\n", r.LoadSecs, r.FileReadSecs, r.LoadSecs/r.FileReadSecs)
	}
	if r.PeakRSSBytes > 0 && r.FileBytes > 0 {
		fmt.Fprintf(w, "peak RSS after loading and serving batch 1: %.2f GB (%.2f× the files, target ≤ 1.2×)\n",
			float64(r.PeakRSSBytes)/1e9, float64(r.PeakRSSBytes)/float64(r.FileBytes))
	}
	for _, d := range r.Decodes {
		limit := r.ReadGBs * 1e9 / float64(d.BytesPerToken)
		fmt.Fprintf(w, "%s decode, steady state (%d tokens after warm-up), %.2f GB of weights a token: limit %.1f tok/s (read rate ÷ bytes)\n",
			d.DType, r.NewTokens, float64(d.BytesPerToken)/1e9, limit)
		fmt.Fprintf(w, "  batch 1:  %.2f tok/s = %.0f%% of the limit (target ≥ 75%%)\n", d.Batch1, 100*d.Batch1/limit)
		fmt.Fprintf(w, "  batch %d: %.2f tok/s = %.1f× batch 1 (target ≥ 6×)\n", r.Batch, d.BatchN, d.BatchN/d.Batch1)
		fmt.Fprintf(w, "  prefill: %.2f s, %.1f GFLOP/s = %.0f%% of the FMA peak (target ≥ 50%%)\n", d.PrefillSecs, d.PrefillGFLOPs, 100*d.PrefillGFLOPs/r.PeakGFLOPs)
	}
}
