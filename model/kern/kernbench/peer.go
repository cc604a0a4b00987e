package kernbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/model/kern"
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
	detected := detectCore(ctx)
	core := peerCore(kern.SIMDPath(), detected)
	peer := &Peer{Rates: map[string]float64{}}
	for _, threads := range []int{1, 2} {
		cmd := exec.CommandContext(ctx, PeerPython, "-c", peerScript)
		cmd.Stdin = bytes.NewReader(in)
		n := strconv.Itoa(threads)
		cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS="+n, "OMP_NUM_THREADS="+n)
		if core != "" {
			cmd.Env = append(cmd.Env, "OPENBLAS_CORETYPE="+core)
		}
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
		switch {
		case core != "" && core != detected:
			peer.Name += fmt.Sprintf(", OpenBLAS kernels %s (it detected %q)", core, detected)
		case detected != "":
			peer.Name += ", OpenBLAS kernels " + detected
		}
		for k, v := range res.Rates {
			peer.Rates[k+"/"+n] = v
		}
	}
	return peer, nil
}

// OpenBLAS kernel sets ("cores") by the widest vector ISA they use.
var (
	avx512Cores = []string{"SkylakeX", "Cooperlake", "SapphireRapids"}
	avx2Cores   = []string{"Haswell", "Zen"}
)

// peerCore is the OPENBLAS_CORETYPE the peer runs with, "" to leave
// OpenBLAS's own choice. OpenBLAS picks its kernels from the CPU model, and
// an OpenBLAS older than the CPU falls back to SSE3 ones: Debian 12's 0.3.21
// calls this Xeon (family 6, model 207) "Prescott" and runs sgemm at 8–50
// GFLOP/s where its SkylakeX kernels do ~90 on one core. The peer runs the
// kernels of the ISA our path runs, so both sides use the same vector width:
// an AVX-512 set for avx512, an AVX2 one for avx2 (what an AVX2-only CPU
// would get).
func peerCore(path, detected string) string {
	switch path {
	case "avx512":
		if slices.Contains(avx512Cores, detected) {
			return ""
		}
		return "SkylakeX"
	case "avx2":
		if slices.Contains(avx2Cores, detected) {
			return ""
		}
		return "Haswell"
	}
	return ""
}

// detectCore returns the kernel set OpenBLAS picks on its own (its
// OPENBLAS_VERBOSE=2 line "Core: NAME"), or "" when it does not say.
func detectCore(ctx context.Context) string {
	cmd := exec.CommandContext(ctx, PeerPython, "-c", "import numpy; numpy.ones((4, 4), numpy.float32) @ numpy.ones((4, 4), numpy.float32)")
	// Without OPENBLAS_CORETYPE at all: set but empty, OpenBLAS reports
	// "Core not found" and picks yet another set.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") })
	cmd.Env = append(env, "OPENBLAS_VERBOSE=2")
	out, _ := cmd.CombinedOutput()
	return parseCore(string(out))
}

func parseCore(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "Core: "); ok {
			return strings.TrimSpace(name)
		}
	}
	return ""
}
