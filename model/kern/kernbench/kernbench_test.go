package kernbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/model/kern"
)

func TestRunReportsEveryShape(t *testing.T) {
	if kern.FMAPeakLoop(1) == 0 {
		_, err := Run(context.Background(), TrainingShapes[:1], Options{Reps: 1, Slice: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "no FMA peak") {
			t.Fatalf("portable path: error %v, want one saying there is no FMA peak", err)
		}
		return
	}
	shapes := []Shape{{"small", "NN", 8, 16, 24}, {"nt", "NT", 9, 5, 7}, {"tn", "TN", 4, 3, 2}}
	rep, err := Run(context.Background(), shapes, Options{Reps: 1, Slice: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Peak1 <= 0 || rep.Peak2 <= 0 || rep.BestPeak1 < rep.Peak1 || len(rep.Results) != len(shapes) {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		if r.GF1 <= 0 || r.GF2 <= 0 || r.Share1 <= 0 || r.Best1 <= 0 || r.Best2 <= 0 {
			t.Fatalf("result %+v", r)
		}
	}
	var b bytes.Buffer
	Print(&b, rep, &Peer{Name: "x", Rates: map[string]float64{"small/2": 1}})
	if !strings.Contains(b.String(), "kernel path: "+kern.SIMDPath()) || !strings.Contains(b.String(), "small") {
		t.Fatalf("printed:\n%s", b.String())
	}
}

func TestBadShape(t *testing.T) {
	if kern.FMAPeakLoop(1) == 0 {
		t.Skip("portable path")
	}
	for _, s := range []Shape{{"neg", "NN", 0, 1, 1}, {"kind", "XY", 1, 1, 1}} {
		_, err := Run(context.Background(), []Shape{s}, Options{Reps: 1, Slice: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), s.Name) {
			t.Errorf("shape %+v: error %v, want one naming it", s, err)
		}
	}
}

// TestRunBandwidth: a small buffer gives positive rates for every form and
// a printed section naming them (the figures themselves need a buffer past
// the last-level cache: `longhaul bench kernels`).
func TestRunBandwidth(t *testing.T) {
	bw, err := RunBandwidth(context.Background(), 1<<20, Options{Reps: 2, Slice: time.Millisecond})
	if kern.SIMDPath() == "portable" {
		if err == nil || !strings.Contains(err.Error(), "no streaming read") {
			t.Fatalf("portable path: error %v, want one saying there is no read loop", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if bw.Bytes != 1<<20 || bw.K*bw.N*4 != bw.Bytes || bw.Read1 <= 0 || bw.Read2 <= 0 || bw.GEMV1 <= 0 || bw.GEMV2 <= 0 || bw.InPlace <= 0 || bw.BestRead1 < bw.Read1 || bw.BestGEMV2 < bw.GEMV2 {
		t.Fatalf("bandwidth %+v", bw)
	}
	var b bytes.Buffer
	PrintBandwidth(&b, bw)
	if !strings.Contains(b.String(), "streaming read, 1 MiB") || !strings.Contains(b.String(), "GEMV m=1 64×4096") {
		t.Fatalf("printed:\n%s", b.String())
	}
}
