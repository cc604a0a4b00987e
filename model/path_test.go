package model

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// Golden digests of pathWorkload (train 3 steps, then sample), one per
// arithmetic: every SIMD path (AVX2 and AVX-512 compute the same FMA
// chains) and the portable reference loops (unfused, GOAMD64=v1).
const (
	goldenSIMD     = "0043b822e8c41f0d2510a434a061d8ab564576351d7cca707a8e80505acb7fca"
	goldenPortable = "97625aed5a7a2c709f465c8d9e1690f3b4fd21eb61dca4d87384bda4335ec729"
)

// pathWorkload trains a small model for a few steps (PG and SFT losses,
// sequence lengths that leave tile tails everywhere) and then samples from
// it; the digest covers the final weights, the sampled tokens and their
// logprobs, and the training stats.
func pathWorkload(t testing.TB) string {
	t.Helper()
	cfg := builtinConfig(64, 4, 2, 88, 96)
	m, err := NewBuiltin(cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	seqs := testSeqs(t, m, []int{70, 33, 17, 9, 41, 96}, 3)
	tr, err := NewTrainer(m, testOptim())
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, st := range trainSteps(t, tr, seqs, 3) {
		for _, v := range []float64{float64(st.Loss), float64(st.GradNorm), float64(st.KL)} {
			h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)))
		}
	}
	d := m.Digest()
	h.Write(d[:])
	reqs := []SampleRequest{
		{Prompt: seqs[0].Tokens[:20], MaxTokens: 24, Temperature: 1, Seed: 1},
		{Prompt: seqs[1].Tokens[:5], MaxTokens: 24, Temperature: 0.8, TopK: 30, Seed: 2},
		{Prompt: seqs[2].Tokens[:1], MaxTokens: 24, Temperature: 1, TopP: 0.9, Seed: 3},
	}
	res, err := m.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		for i, tok := range r.Tokens {
			h.Write(binary.LittleEndian.AppendUint32(nil, uint32(tok)))
			h.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(r.Logprobs[i])))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestPathDigestChild is the body run in a child process by
// TestKernelPathsBitIdentical; it does nothing in a normal test run.
func TestPathDigestChild(t *testing.T) {
	if os.Getenv("LONGHAUL_PATH_CHILD") != "1" {
		t.Skip("helper for TestKernelPathsBitIdentical")
	}
	t.Logf("path=%s digest=%s", kern.SIMDPath(), pathWorkload(t))
}

var digestLine = regexp.MustCompile(`path=(\S+) digest=([0-9a-f]{64})`)

// TestKernelPathsBitIdentical runs the workload in child processes on every
// SIMD path this CPU has (kern.PathEnv forces each one for a whole process,
// model code included) and requires the same digest from all of them. The
// forced portable path must give the portable build's golden bits.
func TestKernelPathsBitIdentical(t *testing.T) {
	var paths []string
	switch kern.SIMDPath() {
	case "avx512":
		paths = []string{"avx2", "avx512", "portable"}
	case "avx2":
		paths = []string{"avx2", "portable"}
	}
	if len(paths) < 3 {
		t.Skipf("kernel path %q: need AVX2 and AVX-512 on this CPU to compare them", kern.SIMDPath())
	}
	var digests []string
	for _, p := range paths {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPathDigestChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "LONGHAUL_PATH_CHILD=1", kern.PathEnv+"="+p)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child on %s: %v\n%s", p, err, out)
		}
		mm := digestLine.FindSubmatch(out)
		if mm == nil || string(mm[1]) != p {
			t.Fatalf("child on %s: no digest for that path in:\n%s", p, out)
		}
		t.Logf("%s: %s", p, mm[2])
		digests = append(digests, string(mm[2]))
	}
	if digests[0] != digests[1] {
		t.Fatalf("AVX2 and AVX-512 runs differ: %v", digests)
	}
	if digests[2] != goldenPortable {
		t.Fatalf("forced portable path: %s, portable build's golden %s", digests[2], goldenPortable)
	}
}

// TestPathGoldenDigest pins the workload's bits for the arithmetic this
// process runs, so a kernel change that alters any summation order fails
// here even on a machine with only one path.
func TestPathGoldenDigest(t *testing.T) {
	want := goldenSIMD
	if kern.SIMDPath() == "portable" {
		want = goldenPortable
	}
	got := pathWorkload(t)
	if got != want {
		t.Fatalf("path %s: workload digest %s, golden %s", kern.SIMDPath(), got, want)
	}
}
