package llama

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/model"
)

// nShards is the fixed number of shards work is split into. It never
// follows GOMAXPROCS: shard results are combined in shard order, so the
// bits depend on this constant only.
const nShards = 2

// DefaultContext caps the sequence length (and so the rope tables and
// workspaces) when the config allows longer; see SetContext.
const DefaultContext = 4096

// Model is one Llama-family network: config, the parameter slab and
// reusable workspaces. Its methods must be called from one goroutine at a
// time; they parallelise internally over nShards shards.
type Model struct {
	cfg      Config
	specs    []tensorSpec
	w        []float32
	p        params
	ctx      int       // longest sequence accepted
	cos, sin []float32 // (ctx, hd/2)
	ws       [nShards]*workspace
	srcDir   string // the HF directory it was loaded from, if any

	decodeSplit bool        // Generate: split the head over two goroutines (one request)
	dh          *decodeHead // Generate: the head packed for decode (decodehead.go)
	packMin     int         // packHeadMinSteps; tests change it
}

// New returns a model initialised as transformers does from seed:
// N(0, initializer_range) for matrices and embeddings, 0 for biases,
// 1 for norm gains.
func New(cfg Config, seed uint64) (*Model, error) {
	m, err := newEmpty(cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rng.NewPCG(seed))
	for _, s := range m.specs {
		t := m.w[s.off : s.off+s.size]
		switch {
		case len(s.shape) == 1 && !s.decay && isBias(s.name):
			clear(t)
		case len(s.shape) == 1:
			for i := range t {
				t[i] = 1
			}
		default:
			for i := range t {
				t[i] = float32(r.NormFloat64() * m.cfg.InitStd)
			}
		}
	}
	return m, nil
}

func isBias(name string) bool { return len(name) > 5 && name[len(name)-5:] == ".bias" }

func newEmpty(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, specs: layout(cfg)}
	m.w = make([]float32, numParams(m.specs))
	m.p = bind(m.w, cfg, m.specs)
	if err := m.SetContext(min(cfg.MaxPos, DefaultContext)); err != nil {
		return nil, err
	}
	return m, nil
}

// SetContext sets the longest sequence the model accepts (at most
// max_position_embeddings) and drops the workspaces.
func (m *Model) SetContext(n int) error {
	if n < 1 || n > m.cfg.MaxPos {
		return fmt.Errorf("llama: context %d outside [1, max_position_embeddings=%d]", n, m.cfg.MaxPos)
	}
	cos, sin, err := ropeTables(m.cfg, n)
	if err != nil {
		return err
	}
	m.ctx, m.cos, m.sin = n, cos, sin
	m.ws = [nShards]*workspace{}
	return nil
}

// Config returns the architecture.
func (m *Model) Config() Config { return m.cfg }

// Context is the longest sequence accepted.
func (m *Model) Context() int { return m.ctx }

// NumParams is the number of float32 parameters.
func (m *Model) NumParams() int { return len(m.w) }

// Tensor returns the named tensor's view into the slab (nil if absent),
// for tests and tools. A write through it must come before the next
// Generate call, or go through a new Tensor call (which drops Generate's
// packed copy of the head).
func (m *Model) Tensor(name string) []float32 {
	for _, s := range m.specs {
		if s.name == name {
			m.weightsChanged() // the caller may write through the slice
			return m.w[s.off : s.off+s.size]
		}
	}
	return nil
}

// TensorNames lists the tensors in slab order.
func (m *Model) TensorNames() []string {
	out := make([]string, len(m.specs))
	for i, s := range m.specs {
		out[i] = s.name
	}
	return out
}

// Digest is the SHA-256 of the weights (little-endian float32, slab order).
func (m *Model) Digest() [32]byte {
	h := sha256.New()
	buf := make([]byte, 0, 1<<16)
	for i, v := range m.w {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		if len(buf) == cap(buf) || i == len(m.w)-1 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Clone returns an independent copy of the model (fresh workspaces).
func (m *Model) Clone() *Model {
	c, err := newEmpty(m.cfg)
	if err != nil {
		panic(err) // m's config was validated when m was built
	}
	copy(c.w, m.w)
	c.srcDir = m.srcDir
	if c.ctx != m.ctx {
		_ = c.SetContext(m.ctx)
	}
	return c
}

// CopyWeightsFrom overwrites m's weights with src's (same architecture).
func (m *Model) CopyWeightsFrom(src *Model) error {
	if len(src.w) != len(m.w) || !src.cfg.Equal(m.cfg) {
		return fmt.Errorf("llama: copy weights: architectures differ")
	}
	copy(m.w, src.w)
	m.weightsChanged()
	return nil
}

func (m *Model) checkTokens(toks []int32) error {
	if len(toks) == 0 {
		return fmt.Errorf("llama: empty sequence")
	}
	if len(toks) > m.ctx {
		return fmt.Errorf("llama: sequence of %d tokens exceeds context %d", len(toks), m.ctx)
	}
	for i, t := range toks {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("llama: token %d at %d outside vocab [0,%d)", t, i, m.cfg.Vocab)
		}
	}
	return nil
}

// splitShards splits items into nShards contiguous ranges balancing cost;
// the split depends only on the costs.
func splitShards(cost []int) [nShards][2]int {
	total := 0
	for _, c := range cost {
		total += c
	}
	best, bestDiff, acc := 0, math.MaxInt, 0
	for s := 0; s <= len(cost); s++ {
		if diff := max(total-2*acc, 2*acc-total); diff < bestDiff {
			best, bestDiff = s, diff
		}
		if s < len(cost) {
			acc += cost[s]
		}
	}
	return [nShards][2]int{{0, best}, {best, len(cost)}}
}

// runShards runs fn for each shard (shard 0 on the caller's goroutine).
func runShards(fn func(shard int)) {
	var wg sync.WaitGroup
	for s := 1; s < nShards; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(s)
		}()
	}
	fn(0)
	wg.Wait()
}

// Logprobs returns log p(seq[t] | seq[:t]) for each sequence (entry 0 is 0).
func (m *Model) Logprobs(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	cost := make([]int, len(seqs))
	for i, s := range seqs {
		if err := m.checkTokens(s); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		cost[i] = len(s)
	}
	out := make([][]float32, len(seqs))
	split := splitShards(cost)
	var errs [nShards]error
	runShards(func(s int) {
		for i := split[s][0]; i < split[s][1]; i++ {
			if err := ctx.Err(); err != nil {
				errs[s] = err
				return
			}
			toks := seqs[i]
			ws := m.workspace(s, len(toks), false)
			m.forward(ws, toks, false, nil)
			V := m.cfg.Vocab
			lps := make([]float32, len(toks))
			for t := 1; t < len(toks); t++ {
				row := ws.logits[(t-1)*V : t*V]
				lse, _ := model.LogSumExp(row, ws.e)
				lps[t] = row[toks[t]] - lse
			}
			out[i] = lps
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("llama: logprobs: %w", err)
		}
	}
	return out, nil
}

// Logits returns the raw logits (len(toks), V) of one sequence: row t
// scores token t+1. It is the training forward.
func (m *Model) Logits(toks []int32) ([]float32, error) {
	if err := m.checkTokens(toks); err != nil {
		return nil, err
	}
	ws := m.workspace(0, len(toks), false)
	m.forward(ws, toks, false, nil)
	return append([]float32(nil), ws.logits[:len(toks)*m.cfg.Vocab]...), nil
}
