package model

import (
	"context"
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
// are summed in shard order, so the bits depend on this constant only.
const nShards = 2

// Model is the policy: weights plus reusable workspaces. Its methods
// (Generate, Logprobs, and a Trainer's Step) must be called from one
// goroutine at a time; they parallelise internally over nShards shards.
// The exception: GenerateOn calls on different lanes may run at once.
type Model struct {
	cfg      Config
	specs    []tensorSpec
	w        []float32 // the parameter slab
	p        params    // named views into w
	cos, sin []float32 // rope tables (ctx, hs/2); nil for learned positions

	ws    [nShards]*workspace // training/prefill activations, allocated on first use
	dec   [nShards]*decodeWS  // decode-step buffers, allocated on first use
	kv    *kvPool             // KV caches kept for the next Generate call; shared with clones
	wteT  []float32           // (d, V) transposed head for decode, of weights version wteTv
	wteTv uint64              // the wver wteT was made from
	wver  uint64              // bumped when the weights change in place (CopyWeightsFrom, a trainer step)
	dpk   *decodePacked       // decode's weights laid out by kern.Pack, refreshed by Generate when worth it
	// prep guards what concurrent GenerateOn calls share: wteT, dpk, the
	// prefix key and the stats below
	prep sync.Mutex

	prefilled     int          // prompt tokens the last Generate computed (the rest were shared)
	prefillShards [nShards]int // of those, the tokens each shard computed
	fromCache     int          // prompt positions the last Generate took from the prefix cache
	pkey, pkeyVer uint64       // the prefix cache's key for these weights, and the wver it was made at
}

// New builds a model with weights initialised deterministically from seed:
// N(0, 0.02) for matrices and embeddings, N(0, 0.02/√(2L)) for the two
// projections that write into the residual stream (GPT-2), 1 for norm gains.
func New(cfg Config, seed uint64) (*Model, error) {
	m, err := newEmpty(cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rng.NewPCG(seed))
	resid := 0.02 / math.Sqrt(float64(2*cfg.Layers))
	for _, s := range m.specs {
		t := m.w[s.off : s.off+s.size]
		switch {
		case len(s.shape) == 1:
			for i := range t {
				t[i] = 1
			}
		default:
			std := 0.02
			if strings.HasSuffix(s.name, "attn.proj.weight") || strings.HasSuffix(s.name, "mlp.proj.weight") {
				std = resid
			}
			for i := range t {
				t[i] = float32(r.NormFloat64() * std)
			}
		}
	}
	return m, nil
}

func newEmpty(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, specs: layout(cfg), kv: newKVPool()}
	m.w = make([]float32, numParams(m.specs))
	m.p = bind(m.w, cfg, m.specs)
	if cfg.Positions == PosRope {
		m.cos, m.sin = ropeTables(cfg.Context, cfg.HeadDim(), cfg.RopeTheta)
	}
	return m, nil
}

// Config returns the model's architecture.
func (m *Model) Config() Config { return m.cfg }

// NumParams is the number of float32 parameters.
func (m *Model) NumParams() int { return len(m.w) }

// Digest is the SHA-256 of the weights as little-endian float32 bytes in
// slab order: equal digests mean bit-identical weights.
func (m *Model) Digest() [32]byte {
	h := sha256.New()
	buf := make([]byte, 0, 4096)
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

// layerKV is one layer's key/value store, k and v (H, ctx, hs): the KV
// cache in generation and the saved keys/values in training. The cache
// also keeps the keys transposed, kt, so a decode step's scores are
// multiply-add chains over contiguous keys. kt is blocked: head h, then
// blocks of ktBlock positions, each (hs, ktBlock) (index h·hs·ktLen(ctx) +
// ktAt(hs, j, p)). A plain (hs, ctx) layout put a head's hs key rows
// ctx·4 bytes apart, which at ctx 256 maps them onto 4 of L1's 64 sets:
// every decode step missed L1 on every key line (3× slower attention).
type layerKV struct{ k, v, kt []float32 }

// ktBlock is the positions per block of the transposed keys: two vectors
// of the widest path (2×16 lanes), so a kernel's chains stay in one block.
const ktBlock = 32

// ktLen is the positions a head's blocked keys hold: ctx rounded up to
// whole blocks (lanes past the context are read as padding, never used).
func ktLen(T int) int { return (T + ktBlock - 1) / ktBlock * ktBlock }

// ktAt is the offset of key component p at position j in a head's blocked
// transposed keys.
func ktAt(hs, j, p int) int { return (j/ktBlock)*hs*ktBlock + p*ktBlock + j%ktBlock }

func newKV(c Config, transposed bool) []layerKV {
	n := c.Context * c.Dim
	per := 2 * n
	if transposed {
		per += ktLen(c.Context) * c.Dim
	}
	buf := make([]float32, per*c.Layers)
	kv := make([]layerKV, c.Layers)
	for l := range kv {
		b := buf[l*per : (l+1)*per]
		kv[l] = layerKV{k: b[:n:n], v: b[n : 2*n : 2*n]}
		if transposed {
			kv[l].kt = b[2*n:]
		}
	}
	return kv
}

// layerActs are what one block's forward saves for its backward, for up to
// ctx rows (row r is position p0+r).
type layerActs struct {
	x     []float32 // (T, d) block input
	ln1   []float32 // (T, d)
	rstd1 []float32 // (T)
	q     []float32 // (H, T, hs) queries after rope
	probs []float32 // H × (T·T) attention probabilities, block layout
	att   []float32 // (T, d) heads merged, the input of attn.proj
	x2    []float32 // (T, d) residual after attention
	ln2   []float32 // (T, d)
	rstd2 []float32 // (T)
	h     []float32 // (T, 2F) [gate | up]
	sig   []float32 // (T, F) sigmoid(gate)
	act   []float32 // (T, F) silu(gate)·up
}

// workspace holds one shard's activations, gradient scratch and parameter
// gradients for one sequence of up to ctx tokens (as llm.c, allocated once
// and reused).
type workspace struct {
	layers []layerActs
	kv     []layerKV
	xf     []float32 // (T, d) final residual
	lnf    []float32 // (T, d)
	rstdf  []float32 // (T)
	logits []float32 // (T, V)

	qkv  []float32 // (T, 3d) projection scratch
	e    []float32 // (V) logSumExp scratch
	hout []float32 // (H, T, hs) per-head attention output scratch

	// backward scratch
	dlogits []float32 // (T, V)
	dx      []float32 // (T, d) gradient of the residual stream
	dln     []float32 // (T, d)
	datt    []float32 // (T, d)
	dqkv    []float32 // (T, 3d)
	dq      []float32 // (H, T, hs)
	dk, dv  []float32 // (H, T, hs)
	dhout   []float32 // (H, T, hs)
	dp      []float32 // (attnBlock, T)
	dh      []float32 // (T, 2F)
	dact    []float32 // (T, F)

	grad  []float32 // parameter gradients, laid out like the weights
	g     params
	train bool // backward buffers allocated

	// par > 1 spreads forward's products (row blocks, kern.MatMulPar) and
	// attention heads over that many goroutines: for a prefill the other
	// shard has no work for. Row and head splits leave every value's
	// arithmetic unchanged.
	par int
}

func (m *Model) workspace(shard int, train bool) *workspace {
	ws := m.ws[shard]
	if ws == nil {
		ws = newWorkspace(m.cfg)
		m.ws[shard] = ws
	}
	if train && !ws.train {
		ws.allocTrain(m.cfg, m.specs)
	}
	return ws
}

func newWorkspace(c Config) *workspace {
	T, d, f, V := c.Context, c.Dim, c.Hidden, c.Vocab
	ws := &workspace{layers: make([]layerActs, c.Layers), kv: newKV(c, false)}
	for l := range ws.layers {
		ws.layers[l] = layerActs{
			x: make([]float32, T*d), ln1: make([]float32, T*d), rstd1: make([]float32, T),
			q: make([]float32, T*d), probs: make([]float32, c.Heads*T*T), att: make([]float32, T*d),
			x2: make([]float32, T*d), ln2: make([]float32, T*d), rstd2: make([]float32, T),
			h: make([]float32, T*2*f), sig: make([]float32, T*f), act: make([]float32, T*f),
		}
	}
	ws.xf = make([]float32, T*d)
	ws.lnf = make([]float32, T*d)
	ws.rstdf = make([]float32, T)
	ws.logits = make([]float32, T*V)
	ws.qkv = make([]float32, T*3*d)
	ws.e = make([]float32, V)
	ws.hout = make([]float32, T*d)
	return ws
}

func (ws *workspace) allocTrain(c Config, specs []tensorSpec) {
	T, d, f, V := c.Context, c.Dim, c.Hidden, c.Vocab
	ws.dlogits = make([]float32, T*V)
	ws.dx = make([]float32, T*d)
	ws.dln = make([]float32, T*d)
	ws.datt = make([]float32, T*d)
	ws.dqkv = make([]float32, T*3*d)
	ws.dq = make([]float32, T*d)
	ws.dk = make([]float32, T*d)
	ws.dv = make([]float32, T*d)
	ws.dhout = make([]float32, T*d)
	ws.dp = make([]float32, attnBlock*T)
	ws.dh = make([]float32, T*2*f)
	ws.dact = make([]float32, T*f)
	ws.grad = make([]float32, numParams(specs))
	ws.g = bind(ws.grad, c, specs)
	ws.train = true
}

// forward runs positions p0..p0+len(toks)-1 of one sequence. kv holds the
// keys/values of positions < p0 and receives the new ones. With lastOnly
// only the last row's logits are computed (into logits row 0), as prefill
// needs; otherwise every row's.
func (m *Model) forward(ws *workspace, toks []int32, p0 int, kv []layerKV, lastOnly bool) {
	c := m.cfg
	n, d, H, hs, f, T := len(toks), c.Dim, c.Heads, c.HeadDim(), c.Hidden, c.Context
	half := hs / 2
	scale := float32(1 / math.Sqrt(float64(hs)))
	x := ws.layers[0].x
	embedForward(x, toks, m.p.wte, m.p.wpe, p0, d)
	for l := range c.Layers {
		a, lp := &ws.layers[l], &m.p.layers[l]
		rmsnormForward(a.ln1, a.rstd1, a.x, lp.ln1, n, d, c.NormEps)
		kern.MatMulPar(ws.qkv, a.ln1, lp.qkv, n, d, 3*d, false, ws.par)
		// split heads: q into the workspace, k and v into the store
		for r := range n {
			pos := p0 + r
			src := ws.qkv[r*3*d : (r+1)*3*d]
			for h := range H {
				qh := a.q[(h*T+r)*hs : (h*T+r+1)*hs]
				kh := kv[l].k[(h*T+pos)*hs : (h*T+pos+1)*hs]
				vh := kv[l].v[(h*T+pos)*hs : (h*T+pos+1)*hs]
				copy(qh, src[h*hs:])
				copy(kh, src[d+h*hs:])
				copy(vh, src[2*d+h*hs:])
				if m.cos != nil {
					cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
					ropeForward(qh, cs, sn)
					ropeForward(kh, cs, sn)
				}
			}
		}
		heads := func(h0, h1 int) {
			for h := h0; h < h1; h++ {
				attnForward(ws.hout[h*T*hs:], a.probs[h*T*T:], a.q[h*T*hs:], kv[l].k[h*T*hs:], kv[l].v[h*T*hs:], p0, n, hs, scale)
			}
		}
		if ws.par > 1 {
			kern.Fork(ws.par, func(i int) { heads(i*H/ws.par, (i+1)*H/ws.par) })
		} else {
			heads(0, H)
		}
		mergeHeads(a.att, ws.hout, n, H, hs, T)
		copy(a.x2[:n*d], a.x[:n*d])
		kern.MatMulPar(a.x2, a.att, lp.proj, n, d, d, true, ws.par)
		rmsnormForward(a.ln2, a.rstd2, a.x2, lp.ln2, n, d, c.NormEps)
		kern.MatMulPar(a.h, a.ln2, lp.fc, n, d, 2*f, false, ws.par)
		swigluForward(a.act, a.sig, a.h, n, f)
		next := ws.xf
		if l+1 < c.Layers {
			next = ws.layers[l+1].x
		}
		copy(next[:n*d], a.x2[:n*d])
		kern.MatMulPar(next, a.act, lp.fc2, n, f, d, true, ws.par)
	}
	if lastOnly {
		r := n - 1
		rmsnormForward(ws.lnf, ws.rstdf, ws.xf[r*d:], m.p.lnf, 1, d, c.NormEps)
		kern.MatMulNT(ws.logits, ws.lnf, m.p.wte, 1, d, c.Vocab, false)
		return
	}
	rmsnormForward(ws.lnf, ws.rstdf, ws.xf, m.p.lnf, n, d, c.NormEps)
	kern.MatMulNTPar(ws.logits, ws.lnf, m.p.wte, n, d, c.Vocab, false, ws.par)
}

// mergeHeads writes per-head rows (H, T, hs) into token rows (n, H·hs).
func mergeHeads(dst, src []float32, n, H, hs, T int) {
	d := H * hs
	for r := range n {
		for h := range H {
			copy(dst[r*d+h*hs:r*d+(h+1)*hs], src[(h*T+r)*hs:(h*T+r+1)*hs])
		}
	}
}

// splitHeads is the inverse of mergeHeads.
func splitHeads(dst, src []float32, n, H, hs, T int) {
	d := H * hs
	for r := range n {
		for h := range H {
			copy(dst[(h*T+r)*hs:(h*T+r+1)*hs], src[r*d+h*hs:r*d+(h+1)*hs])
		}
	}
}

// backward back-propagates ws.dlogits (n, V) through the forward just run
// on toks (from position 0, keys/values in ws.kv), accumulating into ws.grad.
func (m *Model) backward(ws *workspace, toks []int32) {
	c := m.cfg
	n, d, H, hs, f, T, V := len(toks), c.Dim, c.Heads, c.HeadDim(), c.Hidden, c.Context, c.Vocab
	half := hs / 2
	scale := float32(1 / math.Sqrt(float64(hs)))
	p, g := &m.p, &ws.g

	// tied head: logits = lnf·wteᵀ
	kern.MatMul(ws.dln, ws.dlogits, p.wte, n, V, d, false)
	kern.MatMulTN(g.wte, ws.dlogits, ws.lnf, V, n, d, true)
	clear(ws.dx[:n*d])
	rmsnormBackward(ws.dx, g.lnf, ws.dln, ws.xf, ws.rstdf, p.lnf, n, d)

	for l := c.Layers - 1; l >= 0; l-- {
		a, lp, gl := &ws.layers[l], &p.layers[l], &g.layers[l]
		// MLP: out = x2 + act·fc2; act = swiglu(ln2·fc); ln2 = rmsnorm(x2)
		kern.MatMulNT(ws.dact, ws.dx, lp.fc2, n, d, f, false)
		kern.MatMulTN(gl.fc2, a.act, ws.dx, f, n, d, true)
		swigluBackward(ws.dh, ws.dact, a.h, a.sig, n, f)
		kern.MatMulNT(ws.dln, ws.dh, lp.fc, n, 2*f, d, false)
		kern.MatMulTN(gl.fc, a.ln2, ws.dh, d, n, 2*f, true)
		rmsnormBackward(ws.dx, gl.ln2, ws.dln, a.x2, a.rstd2, lp.ln2, n, d)

		// attention: x2 = x + att·proj
		kern.MatMulNT(ws.datt, ws.dx, lp.proj, n, d, d, false)
		kern.MatMulTN(gl.proj, a.att, ws.dx, d, n, d, true)
		splitHeads(ws.dhout, ws.datt, n, H, hs, T)
		clear(ws.dk)
		clear(ws.dv)
		kv := ws.kv[l]
		for h := range H {
			o := h * T * hs
			attnBackward(ws.dq[o:], ws.dk[o:], ws.dv[o:], ws.dp, ws.dhout[o:], a.probs[h*T*T:], a.q[o:], kv.k[o:], kv.v[o:], n, hs, scale)
		}
		// gather q, k, v gradients into (n, 3d), undoing rope
		for r := range n {
			dst := ws.dqkv[r*3*d : (r+1)*3*d]
			for h := range H {
				o := (h*T + r) * hs
				dq := dst[h*hs : (h+1)*hs]
				dk := dst[d+h*hs : d+(h+1)*hs]
				copy(dq, ws.dq[o:o+hs])
				copy(dk, ws.dk[o:o+hs])
				copy(dst[2*d+h*hs:2*d+(h+1)*hs], ws.dv[o:o+hs])
				if m.cos != nil {
					cs, sn := m.cos[r*half:(r+1)*half], m.sin[r*half:(r+1)*half]
					ropeBackward(dq, cs, sn)
					ropeBackward(dk, cs, sn)
				}
			}
		}
		kern.MatMulNT(ws.dln, ws.dqkv, lp.qkv, n, 3*d, d, false)
		kern.MatMulTN(gl.qkv, a.ln1, ws.dqkv, d, n, 3*d, true)
		rmsnormBackward(ws.dx, gl.ln1, ws.dln, a.x, a.rstd1, lp.ln1, n, d)
	}
	embedBackward(g.wte, g.wpe, ws.dx, toks, 0, d)
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
		if diff := abs(total - 2*acc); diff < bestDiff {
			best, bestDiff = s, diff
		}
		if s < len(cost) {
			acc += cost[s]
		}
	}
	return [nShards][2]int{{0, best}, {best, len(cost)}}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// runShards runs fn for each shard, shard 0 on the calling goroutine and
// the others on kern's helper goroutines (which spin briefly between jobs,
// so the decode steps' back-to-back forks do not each pay a thread
// wake-up), and waits for all.
func runShards(fn func(shard int)) { kern.Fork(nShards, fn) }

func (m *Model) checkTokens(toks []int32) error {
	if len(toks) == 0 {
		return fmt.Errorf("model: empty sequence")
	}
	if len(toks) > m.cfg.Context {
		return fmt.Errorf("model: sequence of %d tokens exceeds context %d", len(toks), m.cfg.Context)
	}
	for i, t := range toks {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("model: token %d at %d outside vocab [0,%d)", t, i, m.cfg.Vocab)
		}
	}
	return nil
}

// Logprobs returns, for each sequence, the log-probability of token i given
// tokens[:i] (log-softmax of the raw logits, temperature 1); entry 0 is 0.
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
		lo, hi := split[s][0], split[s][1]
		if lo == hi {
			return
		}
		ws := m.workspace(s, false)
		for i := lo; i < hi; i++ {
			if err := ctx.Err(); err != nil {
				errs[s] = err
				return
			}
			toks := seqs[i]
			m.forward(ws, toks, 0, ws.kv, false)
			lps := make([]float32, len(toks))
			V := m.cfg.Vocab
			for t := 1; t < len(toks); t++ {
				row := ws.logits[(t-1)*V : t*V]
				lse, _ := logSumExp(row, ws.e)
				lps[t] = row[toks[t]] - lse
			}
			out[i] = lps
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("model: logprobs: %w", err)
		}
	}
	return out, nil
}

// Logits returns the raw next-token logits of every position of one
// sequence, (len(toks), V) row-major: row t scores token t+1. It is the
// training forward, for tools and cross-checks (bench/).
func (m *Model) Logits(toks []int32) ([]float32, error) {
	if err := m.checkTokens(toks); err != nil {
		return nil, err
	}
	ws := m.workspace(0, false)
	m.forward(ws, toks, 0, ws.kv, false)
	return append([]float32(nil), ws.logits[:len(toks)*m.cfg.Vocab]...), nil
}

// Clone returns an independent model with a copy of m's weights (and fresh
// workspaces): e.g. a generation snapshot of version k while a trainer
// steps m to k+1 on another goroutine. The clone shares m's pool of spare
// KV caches and the prefix cache's budget (safe for concurrent use), not
// its entries: its weights get their own key.
func (m *Model) Clone() *Model {
	c, err := newEmpty(m.cfg)
	if err != nil {
		panic(err) // m's config was validated when m was built
	}
	copy(c.w, m.w)
	c.kv = m.kv
	return c
}

// CopyWeightsFrom overwrites m's weights with src's (same config), e.g. to
// publish a new version into a generation snapshot without reallocating.
func (m *Model) CopyWeightsFrom(src *Model) error {
	if src.cfg != m.cfg {
		return fmt.Errorf("model: copy weights: config %+v differs from %+v", src.cfg, m.cfg)
	}
	copy(m.w, src.w)
	m.wver++
	return nil
}
