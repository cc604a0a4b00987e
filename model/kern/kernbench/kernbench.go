// Package kernbench measures where a machine stands: its FMA peak on the
// kernel path in use (1 and 2 cores), the kern GEMM rate at the model's
// training shapes as a share of that peak, and, when /usr/bin/python3 has
// numpy, OpenBLAS on the same shapes as a peer. The machine is usually
// shared, so every kernel timing is paired with a peak timing taken right
// before it and the shares are medians of those pairs.
package kernbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// Shape is one product: C[M×N] = op(A)·op(B) in layout Kind (NN, NT, TN).
type Shape struct {
	Name    string
	Kind    string
	M, K, N int
}

// TrainingShapes are the default model's products for one 512-token shard
// (d = 128, F = 352, V = 264) plus two generic training shapes.
var TrainingShapes = []Shape{
	{"qkv", "NN", 512, 128, 384}, {"fc", "NN", 512, 128, 704}, {"fc2", "NN", 512, 352, 128},
	{"logits", "NT", 512, 128, 264}, {"dqkv", "NT", 512, 384, 128}, {"dfc2", "NT", 512, 128, 352},
	{"gqkv", "TN", 128, 512, 384}, {"gfc2", "TN", 352, 512, 128}, {"gwte", "TN", 264, 512, 128},
	{"t256", "NN", 256, 128, 512}, {"t1024", "NN", 1024, 256, 1024},
}

// Options sets the measurement effort.
type Options struct {
	Reps  int           // pairs (peak, kernel) per shape and thread count; median reported
	Slice time.Duration // length of each timed slice
}

// Result is one shape's median rates (GFLOP/s) and shares of the peak
// measured next to them, single-threaded and with 2 shards, and the best
// share of any pair (on a shared machine the median mostly measures the
// other jobs; the best is closest to what the kernels do on a quiet one).
type Result struct {
	Shape
	GF1, GF2       float64
	Share1, Share2 float64
	Best1, Best2   float64 // best share of the paired peak
}

// Report is what Run measures.
type Report struct {
	Path                 string  // kern.SIMDPath()
	Peak1, Peak2         float64 // median FMA peak, GFLOP/s, 1 and 2 cores
	BestPeak1, BestPeak2 float64 // the highest of those peaks
	Results              []Result
	// Load is the machine's load average (/proc/loadavg: 1, 5 and 15
	// minutes) before and after the run; empty where unknown.
	LoadBefore, LoadAfter string
}

// Run measures the peak and every shape. It stops early with ctx's error.
func Run(ctx context.Context, shapes []Shape, o Options) (Report, error) {
	if o.Reps <= 0 {
		o.Reps = 5
	}
	if o.Slice <= 0 {
		o.Slice = 20 * time.Millisecond
	}
	rep := Report{Path: kern.SIMDPath(), LoadBefore: loadAvg()}
	if kern.FMAPeakLoop(1) == 0 {
		return rep, fmt.Errorf("kernbench: kernel path %q has no FMA peak to measure", rep.Path)
	}
	var p1s, p2s []float64
	for _, s := range shapes {
		n0 := len(p1s)
		f, err := mmFunc(s)
		if err != nil {
			return rep, err
		}
		var g1, g2, s1, s2 []float64
		for r := 0; r < o.Reps; r++ {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			p1 := peak(1, o.Slice)
			k1 := rate(s, func() { f(1) }, o.Slice)
			p2 := peak(2, o.Slice)
			k2 := rate(s, func() { f(2) }, o.Slice)
			p1s, p2s = append(p1s, p1), append(p2s, p2)
			g1, g2 = append(g1, k1), append(g2, k2)
			s1, s2 = append(s1, k1/p1), append(s2, k2/p2)
		}
		rep.Results = append(rep.Results, Result{s, median(g1), median(g2), median(s1), median(s2), slices.Max(g1) / slices.Max(p1s[n0:]), slices.Max(g2) / slices.Max(p2s[n0:])})
	}
	rep.Peak1, rep.Peak2 = median(p1s), median(p2s)
	if len(p1s) > 0 {
		rep.BestPeak1, rep.BestPeak2 = slices.Max(p1s), slices.Max(p2s)
	}
	rep.LoadAfter = loadAvg()
	return rep, nil
}

// mmFunc returns a closure running the shape with the given shard count on
// fixed random operands.
func mmFunc(s Shape) (func(shards int), error) {
	if s.M <= 0 || s.K <= 0 || s.N <= 0 {
		return nil, fmt.Errorf("kernbench: shape %s: dimensions must be positive, got %d×%d×%d", s.Name, s.M, s.K, s.N)
	}
	r := rand.New(rand.NewPCG(1, 2))
	a, b, c := make([]float32, s.M*s.K), make([]float32, s.K*s.N), make([]float32, s.M*s.N)
	for i := range a {
		a[i] = r.Float32() - 0.5
	}
	for i := range b {
		b[i] = r.Float32() - 0.5
	}
	var mm func(c, a, b []float32, m, k, n int, acc bool, shards int)
	switch s.Kind {
	case "NN":
		mm = kern.MatMulPar
	case "NT":
		mm = kern.MatMulNTPar
	case "TN":
		mm = kern.MatMulTNPar
	default:
		return nil, fmt.Errorf("kernbench: shape %s: kind %q, want NN, NT or TN", s.Name, s.Kind)
	}
	return func(shards int) { mm(c, a, b, s.M, s.K, s.N, false, shards) }, nil
}

// rate runs f for about d and returns GFLOP/s (2·M·K·N per call).
func rate(s Shape, f func(), d time.Duration) float64 {
	f() // warm caches and the scratch pool
	n := 0
	t0 := time.Now()
	for time.Since(t0) < d {
		f()
		n++
	}
	return 2 * float64(s.M*s.K*s.N) * float64(n) / time.Since(t0).Seconds() / 1e9
}

// peak runs the FMA loop on the given number of goroutines for about d and
// returns the total GFLOP/s.
func peak(threads int, d time.Duration) float64 {
	const iters = 20000
	var mu sync.Mutex
	var flops float64
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < threads; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var f float64
			for time.Since(t0) < d {
				f += kern.FMAPeakLoop(iters)
			}
			mu.Lock()
			flops += f
			mu.Unlock()
		}()
	}
	wg.Wait()
	return flops / time.Since(t0).Seconds() / 1e9
}

// loadAvg is the first three fields of /proc/loadavg, or "" off Linux.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Print writes the report, with the peer's rates (nil: none) beside each shape.
func Print(w io.Writer, rep Report, peer *Peer) {
	fmt.Fprintf(w, "kernel path: %s\n", rep.Path)
	if rep.LoadBefore != "" {
		fmt.Fprintf(w, "load average: %s before, %s after (other jobs lower the medians; best: highest rate over highest peak)\n", rep.LoadBefore, rep.LoadAfter)
	}
	fmt.Fprintf(w, "FMA peak (median of paired runs): 1 core %.1f GFLOP/s, 2 cores %.1f GFLOP/s (best %.1f, %.1f)\n", rep.Peak1, rep.Peak2, rep.BestPeak1, rep.BestPeak2)
	if peer != nil {
		fmt.Fprintf(w, "peer: %s\n", peer.Name)
	}
	fmt.Fprintf(w, "%-8s %-3s %-16s %9s %7s %7s %9s %7s %7s", "shape", "op", "m×k·k×n", "1c GF/s", "1c %pk", "best", "2c GF/s", "2c %pk", "best")
	if peer != nil {
		fmt.Fprintf(w, " %9s %9s %7s", "peer 1t", "peer 2t", "2c/peer")
	}
	fmt.Fprintln(w)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-8s %-3s %-16s %9.1f %6.0f%% %6.0f%% %9.1f %6.0f%% %6.0f%%", r.Name, r.Kind, fmt.Sprintf("%dx%dx%d", r.M, r.K, r.N),
			r.GF1, 100*r.Share1, 100*r.Best1, r.GF2, 100*r.Share2, 100*r.Best2)
		if peer != nil {
			p1, p2 := peer.Rates[r.Name+"/1"], peer.Rates[r.Name+"/2"]
			ratio := 0.0
			if p2 > 0 {
				ratio = r.GF2 / p2
			}
			fmt.Fprintf(w, " %9.1f %9.1f %6.2fx", p1, p2, ratio)
		}
		fmt.Fprintln(w)
	}
}

// Peak is the FMA peak (GFLOP/s) of threads goroutines running the path's
// FMA loop for about d; 0 on the portable path.
func Peak(threads int, d time.Duration) float64 { return peak(threads, d) }

// LoadAvg is the first three fields of /proc/loadavg ("" off Linux).
func LoadAvg() string { return loadAvg() }
