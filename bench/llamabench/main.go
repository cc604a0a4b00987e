// Command llamabench times the engine (model/) on an HF directory: generation
// tokens/s at given batch sizes, training tokens/s, or loading (time, the
// time to read the weight files, and peak RSS). bench/hf_bench.sh runs it
// beside bench/torch_llama.py on the same directories and thread counts.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/longhaul-rl/longhaul/internal/cputime"
	"github.com/longhaul-rl/longhaul/model"
)

func main() {
	dir := flag.String("model", "", "HF model directory")
	batches := flag.String("batches", "1,16", "generation batch sizes")
	prompt := flag.Int("prompt", 16, "prompt tokens")
	genTok := flag.Int("gen-tokens", 32, "tokens generated per sequence")
	trainB := flag.Int("train-batch", 0, "training rows (0: no training benchmark)")
	trainT := flag.Int("train-len", 128, "tokens per training row")
	steps := flag.Int("train-steps", 3, "training steps (the fastest is reported)")
	load := flag.Bool("load", false, "time loading and report peak RSS instead")
	huge := flag.Bool("huge-pages", false, "with -load: LoadOptions.HugePages (and the fault floor on huge pages)")
	flag.Parse()
	if err := run(*dir, *batches, *prompt, *genTok, *trainB, *trainT, *steps, *load, *huge); err != nil {
		fmt.Fprintln(os.Stderr, "llamabench:", err)
		os.Exit(1)
	}
}

func run(dir, batches string, prompt, genTok, trainB, trainT, steps int, load, huge bool) error {
	out := map[string]any{"gomaxprocs": runtime.GOMAXPROCS(0)}
	if load {
		// read time first: the page cache is then warm for both
		files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		var size int64
		c0 := cputime.Process()
		t0 := time.Now()
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, fh)
			fh.Close()
			if err != nil {
				return err
			}
			size += n
		}
		read, readCPU := time.Since(t0), cputime.Process()-c0
		// The floor no loader goes under: the kernel handing out (and
		// zeroing) F32-size fresh memory, on the same goroutines. The
		// memory goes back to the OS and the peak RSS counter is reset
		// (clear_refs 5) before LoadDir runs.
		cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			return err
		}
		cfg, err := model.ParseConfig(cb)
		if err != nil {
			return err
		}
		vm0 := vmstat()
		fault, faultCPU := faultIn(int(cfg.F32Bytes()), huge)
		vm1 := vmstat()
		debug.FreeOSMemory()
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			return fmt.Errorf("resetting the peak RSS: %w", err)
		}
		c0 = cputime.Process()
		t0 = time.Now()
		m, err := model.LoadDirWith(dir, model.LoadOptions{HugePages: huge})
		if err != nil {
			return err
		}
		loadT, loadCPU := time.Since(t0), cputime.Process()-c0
		hwm, rss := procStatus("VmHWM"), procStatus("VmRSS")
		f32 := m.Config().F32Bytes()
		out["file_bytes"], out["read_s"], out["load_s"] = size, read.Seconds(), loadT.Seconds()
		out["load_over_read"] = loadT.Seconds() / read.Seconds()
		// CPU seconds (user+sys) too: on a loaded machine wall time is
		// mostly waiting for a core
		out["read_cpu_s"], out["load_cpu_s"] = readCPU.Seconds(), loadCPU.Seconds()
		out["f32_bytes"], out["peak_rss_bytes"], out["rss_bytes"] = f32, hwm, rss
		out["peak_rss_over_f32"] = float64(hwm) / float64(f32)
		out["fault_s"], out["fault_cpu_s"] = fault.Seconds(), faultCPU.Seconds()
		out["huge_pages"], out["anon_huge_bytes"] = huge, procSmapsRollup("AnonHugePages")
		vm2 := vmstat()
		for _, k := range []string{"thp_fault_alloc", "thp_fault_fallback", "compact_stall"} {
			out["fault_"+k], out["load_"+k] = vm1[k]-vm0[k], vm2[k]-vm1[k]
		}
		out["load_over_read_plus_fault"] = loadT.Seconds() / (read.Seconds() + fault.Seconds())
		out["load_cpu_over_read_plus_fault_cpu"] = loadCPU.Seconds() / (readCPU.Seconds() + faultCPU.Seconds())
		return emit(out)
	}
	m, err := model.LoadDir(dir)
	if err != nil {
		return err
	}
	V := m.Config().Vocab
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for _, bs := range strings.Split(batches, ",") {
		B, err := strconv.Atoi(bs)
		if err != nil {
			return err
		}
		reqs := make([]model.SampleRequest, B)
		for i := range reqs {
			p := make([]int32, prompt)
			for j := range p {
				p[j] = int32(r.IntN(V))
			}
			reqs[i] = model.SampleRequest{Prompt: p, MaxTokens: genTok, Temperature: 1, Seed: uint64(i)}
		}
		t0 := time.Now()
		res, err := m.Generate(ctx, reqs)
		if err != nil {
			return err
		}
		n := 0
		for _, x := range res {
			n += len(x.Tokens)
		}
		out[fmt.Sprintf("gen_b%d_tok_s", B)] = float64(n) / time.Since(t0).Seconds()
	}
	if trainB > 0 {
		tr, err := model.NewTrainer(m, model.DefaultOptimConfig())
		if err != nil {
			return err
		}
		seqs := make([]model.Sequence, trainB)
		for i := range seqs {
			s := model.Sequence{Tokens: make([]int32, trainT), Mask: make([]uint8, trainT)}
			for j := range s.Tokens {
				s.Tokens[j] = int32(r.IntN(V))
				s.Mask[j] = uint8(min(j, 1))
			}
			seqs[i] = s
		}
		best := time.Duration(1 << 62)
		for range steps {
			t0 := time.Now()
			if _, err := tr.Step(ctx, seqs, model.LossConfig{Kind: model.LossSFT}); err != nil {
				return err
			}
			best = min(best, time.Since(t0))
		}
		out["train_tok_s"] = float64(trainB*trainT) / best.Seconds()
	}
	out["peak_rss_bytes"] = procStatus("VmHWM")
	return emit(out)
}

// faultIn times writing one byte per page of n fresh bytes on GOMAXPROCS
// goroutines (each page faulted in and zeroed by the kernel); with huge,
// after madvise(MADV_HUGEPAGE) on them, as LoadDir does.
func faultIn(n int, huge bool) (wall, cpu time.Duration) {
	b := make([]byte, n)
	if huge {
		const hp = 2 << 20
		p := uintptr(unsafe.Pointer(&b[0]))
		lo, hi := (p+hp-1)&^(hp-1), (p+uintptr(n))&^(hp-1)
		_ = syscall.Madvise(b[lo-p:hi-p], 14) // MADV_HUGEPAGE
	}
	nw := runtime.GOMAXPROCS(0)
	c0, t0 := cputime.Process(), time.Now()
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * n / nw; i < (w+1)*n/nw; i += 4096 {
				b[i] = 1
			}
		}()
	}
	wg.Wait()
	return time.Since(t0), cputime.Process() - c0
}

func emit(v map[string]any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// vmstat reads /proc/vmstat's counters (system-wide: other processes'
// faults count too).
func vmstat() map[string]int64 {
	out := map[string]int64{}
	b, _ := os.ReadFile("/proc/vmstat")
	for _, line := range strings.Split(string(b), "\n") {
		var k string
		var v int64
		if n, _ := fmt.Sscan(line, &k, &v); n == 2 {
			out[k] = v
		}
	}
	return out
}

// procSmapsRollup returns a /proc/self/smaps_rollup size field in bytes
// (0 if absent): AnonHugePages is the memory on transparent huge pages.
func procSmapsRollup(key string) int64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// procStatus returns a /proc/self/status size field in bytes (0 if absent).
func procStatus(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
