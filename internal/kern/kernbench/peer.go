package kernbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// Peer is the numpy (OpenBLAS) rate per "shape/threads", median GFLOP/s.
type Peer struct {
	Name  string
	Rates map[string]float64
}

// peerScript times numpy's matmul on the shapes it reads as JSON from
// stdin, with the thread count fixed by OPENBLAS_NUM_THREADS in its
// environment, and prints {"name": ..., "rates": {shape: GFLOP/s}}.
const peerScript = `
import json, sys, time
import numpy as np
cfg = json.load(sys.stdin)
rng = np.random.default_rng(1)
out = {}
for s in cfg["shapes"]:
    m, k, n, kind = s["M"], s["K"], s["N"], s["Kind"]
    a = rng.random((k, m) if kind == "TN" else (m, k), dtype=np.float32) - 0.5
    b = rng.random((n, k) if kind == "NT" else (k, n), dtype=np.float32) - 0.5
    A = a.T if kind == "TN" else a
    B = b.T if kind == "NT" else b
    c = np.empty((m, n), dtype=np.float32)
    np.matmul(A, B, out=c)
    rates = []
    for _ in range(cfg["reps"]):
        t0 = time.perf_counter(); cnt = 0
        while time.perf_counter() - t0 < cfg["slice"]:
            np.matmul(A, B, out=c); cnt += 1
        rates.append(2.0 * m * k * n * cnt / (time.perf_counter() - t0) / 1e9)
    rates.sort()
    out[s["Name"]] = rates[len(rates) // 2]
name = "numpy " + np.__version__
try:
    import threadpoolctl
    name += " " + str([(i["internal_api"], i["version"]) for i in threadpoolctl.threadpool_info()])
except Exception:
    pass
json.dump({"name": name, "rates": out}, sys.stdout)
`

// PeerPython is the interpreter the peer runs on (Debian's, where numpy
// and libopenblas0-pthread come from).
const PeerPython = "/usr/bin/python3"

// RunPeer times numpy on the shapes with OpenBLAS on 1 and then 2 threads.
// It returns (nil, nil) when the interpreter or numpy is missing.
func RunPeer(ctx context.Context, shapes []Shape, o Options) (*Peer, error) {
	if _, err := os.Stat(PeerPython); err != nil {
		return nil, nil
	}
	if err := exec.CommandContext(ctx, PeerPython, "-c", "import numpy").Run(); err != nil {
		return nil, nil
	}
	if o.Reps <= 0 {
		o.Reps = 5
	}
	if o.Slice <= 0 {
		o.Slice = 20 * time.Millisecond
	}
	in, err := json.Marshal(map[string]any{"shapes": shapes, "reps": o.Reps, "slice": o.Slice.Seconds()})
	if err != nil {
		return nil, err
	}
	peer := &Peer{Rates: map[string]float64{}}
	for _, threads := range []int{1, 2} {
		cmd := exec.CommandContext(ctx, PeerPython, "-c", peerScript)
		cmd.Stdin = bytes.NewReader(in)
		n := strconv.Itoa(threads)
		cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS="+n, "OMP_NUM_THREADS="+n)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kernbench: numpy peer (%d threads): %w: %s", threads, err, stderr.String())
		}
		var res struct {
			Name  string             `json:"name"`
			Rates map[string]float64 `json:"rates"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, fmt.Errorf("kernbench: numpy peer output: %w", err)
		}
		peer.Name = res.Name
		for k, v := range res.Rates {
			peer.Rates[k+"/"+n] = v
		}
	}
	return peer, nil
}
