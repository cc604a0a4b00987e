package model

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/model/kern"
)

// nShards is the fixed number of data shards work is split into (one per
// core of the target machine). It never follows GOMAXPROCS: shard results
// are combined in shard order, so the bits depend on this constant only.
const nShards = 2

// DefaultContext caps the sequence length (and so the rope tables) when
// the config allows longer; see SetContext.
const DefaultContext = 4096

// Model is one network: config, weights and reusable workspaces. Its
// methods (Generate, Logprobs, Logits, a Trainer's Step) must be called
// from one goroutine at a time; they parallelise internally over nShards
// shards. The exception: GenerateOn calls on different lanes may run at
// once.
type Model struct {
	cfg   Config
	specs []tensorSpec
	// The weights: w is the float32 slab (every tensor at its spec's
	// offset) when the model owns one; a model mapped from a checkpoint
	// has none, its tensors are tf[i] (float32) or th[i] (bfloat16) views
	// of the mapping (1-D tensors are small float32 copies).
	w        []float32
	tf       [][]float32
	th       [][]uint16
	res      *mapping // the mapped checkpoint the views point into, or nil
	p        params
	ctx      int       // longest sequence accepted
	cos, sin []float32 // rope tables (ctx, hd/2)
	srcDir   string    // the HF directory it was loaded from, if any

	ws   [nShards]*workspace // training/prefill activations, made on first use
	dec  [nShards]*decodeWS  // decode-step buffers, made on first use
	kv   *kvPool             // KV caches kept across Generate calls; shared with clones
	wver uint64              // bumped when the weights change in place (CopyWeightsFrom, a trainer step)
	dc   *decodeCopies       // decode's transposed and packed weights (small models), of version dc.ver
	// prep guards what concurrent GenerateOn calls share: dc, the prefix
	// key and the statistics below
	prep sync.Mutex

	prefilled     int          // prompt tokens the last Generate computed (the rest were shared)
	prefillShards [nShards]int // of those, the tokens each shard computed
	fromCache     int          // prompt positions the last Generate took from the prefix cache
	pkey, pkeyVer uint64       // the prefix cache's key for these weights, and the wver it was made at
	copyMax       int64        // tests: the largest model decode keeps copies of (0: copyMaxBytes)
	packMax       int          // tests: the most rows a training batch packs (0: packRows's default)
}

// New returns a model initialised as transformers does from seed:
// N(0, initializer_range) for matrices and embeddings, 0 for biases,
// 1 for norm gains, drawn in slab order.
func New(cfg Config, seed uint64) (*Model, error) {
	m, err := newEmpty(cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rng.NewPCG(seed))
	for i, s := range m.specs {
		t := m.tf[i]
		switch {
		case len(s.shape) == 1 && isBias(s.name):
			clear(t)
		case len(s.shape) == 1:
			fill(t, 1)
		default:
			for j := range t {
				t[j] = float32(r.NormFloat64() * m.cfg.InitStd)
			}
		}
	}
	return m, nil
}

// NewBuiltin returns a model initialised as the built-in model: GPT-2's
// scheme (N(0, 0.02), the two projections that write into the residual
// stream at 0.02/√(2L), norm gains 1), drawn in the order of the fused
// [in, out] tensors the built-in model kept before it was a configuration
// of this engine (embedding; per layer [q | k | v], o, [gate | up], down;
// lm_head when untied), so a seed gives the weights it always gave.
// Biases start at 0.
func NewBuiltin(cfg Config, seed uint64) (*Model, error) {
	m, err := newEmpty(cfg)
	if err != nil {
		return nil, err
	}
	c := m.cfg
	r := rand.New(rng.NewPCG(seed))
	resid := 0.02 / math.Sqrt(float64(2*c.Layers))
	draw := func(std float64) float32 { return float32(r.NormFloat64() * std) }
	// in×out draws, row-major over [in][out], into the [out, in] blocks
	fused := func(in int, std float64, blocks ...[]float32) {
		outs := make([]int, len(blocks))
		width := 0
		for i, b := range blocks {
			outs[i] = len(b) / in
			width += outs[i]
		}
		for i := range in {
			b, o0 := 0, 0
			for o := range width {
				for o-o0 >= outs[b] {
					o0 += outs[b]
					b++
				}
				blocks[b][(o-o0)*in+i] = draw(std)
			}
		}
	}
	for j := range m.p.embed.f {
		m.p.embed.f[j] = draw(0.02)
	}
	for i, s := range m.specs {
		if len(s.shape) == 1 && !isBias(s.name) {
			fill(m.tf[i], 1)
		}
	}
	d, f := c.Dim, c.Hidden
	for l := range m.p.layers {
		lp := &m.p.layers[l]
		fused(d, 0.02, lp.wq.f, lp.wk.f, lp.wv.f)
		fused(c.Heads*c.HeadDim, resid, lp.wo.f)
		fused(d, 0.02, lp.wgate.f, lp.wup.f)
		fused(f, resid, lp.wdown.f)
	}
	if !c.Tied {
		fused(d, 0.02, m.p.head.f)
	}
	return m, nil
}

func fill(t []float32, v float32) {
	for i := range t {
		t[i] = v
	}
}

func isBias(name string) bool { return strings.HasSuffix(name, ".bias") }

func newEmpty(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model: invalid config: %w", err)
	}
	m := newShell(cfg)
	m.setSlab(make([]float32, numParams(m.specs)))
	if err := m.SetContext(min(cfg.MaxPos, DefaultContext)); err != nil {
		return nil, err
	}
	return m, nil
}

// newShell is a model of a validated config with no weights yet.
func newShell(cfg Config) *Model {
	return &Model{cfg: cfg, specs: layout(cfg), kv: newKVPool(cfg)}
}

// setSlab makes w the model's float32 weights.
func (m *Model) setSlab(w []float32) {
	m.w, m.th, m.res = w, nil, nil
	m.tf = slabViews(w, m.specs)
	m.p = bind(m.cfg, m.specs, m.tf, nil)
}

// SetContext sets the longest sequence the model accepts (at most
// max_position_embeddings) and drops the workspaces.
func (m *Model) SetContext(n int) error {
	if n < 1 || n > m.cfg.MaxPos {
		return fmt.Errorf("model: context %d outside [1, max_position_embeddings=%d]", n, m.cfg.MaxPos)
	}
	cos, sin, err := ropeTables(m.cfg, n)
	if err != nil {
		return err
	}
	m.ctx, m.cos, m.sin = n, cos, sin
	m.ws, m.dec = [nShards]*workspace{}, [nShards]*decodeWS{}
	return nil
}

// Config returns the architecture.
func (m *Model) Config() Config { return m.cfg }

// Context is the longest sequence accepted.
func (m *Model) Context() int { return m.ctx }

// NumParams is the number of parameters.
func (m *Model) NumParams() int { return numParams(m.specs) }

// DType is "F32" when every weight is float32, "BF16" when the matrices
// are bfloat16 (mapped from a BF16 checkpoint).
func (m *Model) DType() string {
	for i := range m.specs {
		if m.th != nil && m.th[i] != nil {
			return "BF16"
		}
	}
	return "F32"
}

// ResidentBytes is the size of the weights as the model holds them.
func (m *Model) ResidentBytes() int64 {
	var n int64
	for i, s := range m.specs {
		if m.th != nil && m.th[i] != nil {
			n += 2 * int64(s.size)
		} else {
			n += 4 * int64(s.size)
		}
	}
	return n
}

// ensureF32 gives the model a float32 slab of its weights (bfloat16 widened
// exactly), for training or any write: the F32 master copy.
func (m *Model) ensureF32() {
	if m.w != nil {
		return
	}
	w := make([]float32, numParams(m.specs))
	for i, s := range m.specs {
		dst := w[s.off : s.off+s.size]
		if m.tf[i] != nil {
			copy(dst, m.tf[i])
		} else {
			widenBF16(dst, m.th[i])
		}
	}
	m.setSlab(w)
	m.weightsChanged()
}

// Tensor returns the named tensor's float32 view (nil if absent), for
// tests and tools; the model keeps a float32 slab from then on. A write
// through it must come before the next Generate call, or go through a new
// Tensor call (which marks the weights changed).
func (m *Model) Tensor(name string) []float32 {
	for i, s := range m.specs {
		if s.name == name {
			m.ensureF32()
			m.weightsChanged() // the caller may write through the slice
			return m.tf[i]
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

// specIndex is the index of the named tensor, or −1.
func (m *Model) specIndex(name string) int {
	for i, s := range m.specs {
		if s.name == name {
			return i
		}
	}
	return -1
}

// tensorValues calls f with tensor i's values as float32 (bfloat16
// widened), in runs of at most 64 Ki values.
func (m *Model) tensorValues(i int, f func(v []float32)) {
	if m.tf[i] != nil {
		f(m.tf[i])
		return
	}
	h := m.th[i]
	buf := make([]float32, min(len(h), 64<<10))
	for lo := 0; lo < len(h); lo += len(buf) {
		hi := min(lo+len(buf), len(h))
		widenBF16(buf[:hi-lo], h[lo:hi])
		f(buf[:hi-lo])
	}
}

// eachValue calls f with every weight in slab order, as float32.
func (m *Model) eachValue(f func(v []float32)) {
	for i := range m.specs {
		m.tensorValues(i, f)
	}
}

// Digest is the SHA-256 of the weights as little-endian float32 bytes in
// slab order: equal digests mean bit-identical weights (a bfloat16 weight
// counts as its exact float32 value).
func (m *Model) Digest() [32]byte {
	h := sha256.New()
	buf := make([]byte, 0, 1<<16)
	m.eachValue(func(vs []float32) {
		for _, v := range vs {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) == cap(buf) {
				h.Write(buf)
				buf = buf[:0]
			}
		}
	})
	h.Write(buf)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Clone returns an independent model with m's weights (and fresh
// workspaces): e.g. a generation snapshot of version k while a trainer
// steps m to k+1 on another goroutine. A mapped model's clone shares the
// read-only mapping. The clone shares m's pool of spare KV caches and the
// prefix cache's budget (safe for concurrent use), not its entries: its
// weights get their own key.
func (m *Model) Clone() *Model {
	c := newShell(m.cfg)
	if m.w != nil {
		c.setSlab(append([]float32(nil), m.w...))
	} else {
		c.tf, c.th, c.res = m.tf, m.th, m.res
		c.p = m.p
	}
	c.kv, c.srcDir = m.kv, m.srcDir
	c.ctx, c.cos, c.sin = m.ctx, m.cos, m.sin
	return c
}

// CopyWeightsFrom overwrites m's weights with src's (same architecture),
// e.g. to publish a new version into a generation snapshot without
// reallocating. A mapped src makes m share its mapping unless m has a
// float32 slab, which then receives the values.
func (m *Model) CopyWeightsFrom(src *Model) error {
	if len(src.specs) != len(m.specs) || !src.cfg.Equal(m.cfg) {
		return fmt.Errorf("model: copy weights: architectures differ")
	}
	switch {
	case m.w != nil:
		off := 0
		src.eachValue(func(v []float32) { off += copy(m.w[off:], v) })
	default:
		m.tf, m.th, m.res, m.p = src.tf, src.th, src.res, src.p
		if src.w != nil {
			m.setSlab(append([]float32(nil), src.w...))
		}
	}
	m.weightsChanged()
	return nil
}

// weightsChanged marks every copy made from the weights stale (decode's
// transposed and packed weights, the prefix cache's key).
func (m *Model) weightsChanged() { m.wver++ }

func (m *Model) checkTokens(toks []int32) error {
	if len(toks) == 0 {
		return fmt.Errorf("model: empty sequence")
	}
	if len(toks) > m.ctx {
		return fmt.Errorf("model: sequence of %d tokens exceeds context %d", len(toks), m.ctx)
	}
	for i, t := range toks {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("model: token %d at %d outside vocab [0,%d)", t, i, m.cfg.Vocab)
		}
	}
	return nil
}

// splitShards splits n items into nShards contiguous ranges balancing
// cost; the split depends only on the costs, never on the machine.
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

// runShards runs fn for each shard, shard 0 on the calling goroutine and
// the others on kern's helper goroutines (which spin briefly between jobs,
// so back-to-back forks do not each pay a thread wake-up), and waits.
func runShards(fn func(shard int)) { kern.Fork(nShards, fn) }

// widenBF16 sets dst to the float32 values of src (exact).
func widenBF16(dst []float32, src []uint16) { kern.WidenBF16(dst, src) }
