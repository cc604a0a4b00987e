package llama

import (
	"sync"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// decodeHead is the output head laid out by kern.Pack for decode. The head
// is stored [V, d] (HF layout), so each decode step's kern.MatMulNT
// re-reads it across rows (and, at a few rows, repacks it) on every call;
// at a big vocabulary that product dominates a step (151,936 × 256 on the
// tiny Qwen3: 39 M multiply-adds per row). Packing it once per set of
// weights (packHead) lets every step stream the panels front to back (1 row
// about 4× faster at low load; BenchmarkDecodeHead, docs/hf-models.md).
// The head is split into two column halves, each transposed to [d, half]
// and packed on its own, so the two halves pack in parallel and a single
// request's step runs them on two goroutines. kern.MatMulPacked gives the
// bits of kern.MatMul with the plain operand, which are those of MatMulNT
// with the [V, d] one (each logit is one chain over d in order), so the
// sampler's logprobs stay the trainer's bit for bit
// (TestPackedHeadSameBits).
type decodeHead struct {
	on    bool           // the current Generate call reads the packed head
	fresh bool           // the packing is of the current weights
	half  int            // columns [0, half) and [half, V)
	t     [2][]float32   // the halves transposed, [d, cols]; Pack reads them in place on some paths
	pk    [2]kern.Packed // the halves packed
}

// packHeadMinSteps is the fewest decode steps (the longest completion a
// shard samples) for which packing the head pays: packing costs about
// 4-5 unpacked head products (transpose + pack), and a packed product at
// 1-16 rows saves 0.2-0.75 of one.
const packHeadMinSteps = 8

// packHead decides whether this Generate call's decode reads the packed
// head: yes when a packing of the current weights is kept from an earlier
// call, or when this call's longest completion has at least min steps
// (then it packs). The packing is kept until the weights change
// (weightsChanged), so a generator serving one version packs once; the
// buffers (2·V·d floats) are kept once made.
func (m *Model) packHead(steps, min int) {
	if m.dh == nil {
		m.dh = &decodeHead{}
	}
	dh := m.dh
	dh.on = dh.fresh || steps >= min
	if !dh.on || dh.fresh {
		return
	}
	d, V := m.cfg.Dim, m.cfg.Vocab
	dh.half = V / 2
	var wg sync.WaitGroup
	for i := range 2 {
		lo, hi := 0, dh.half
		if i == 1 {
			lo, hi = dh.half, V
		}
		if cap(dh.t[i]) < (hi-lo)*d {
			dh.t[i] = make([]float32, (hi-lo)*d)
		}
		dh.t[i] = dh.t[i][:(hi-lo)*d]
		wg.Add(1)
		go func() {
			defer wg.Done()
			kern.Transpose(dh.t[i], m.p.head[lo*d:hi*d], hi-lo, d)
			kern.Pack(&dh.pk[i], dh.t[i], d, hi-lo)
		}()
	}
	wg.Wait()
	dh.fresh = true
}

// weightsChanged drops the packed head: every path that writes the weights
// after construction calls it (Tensor, which hands out a writable slice;
// CopyWeightsFrom; the trainer's optimizer step).
func (m *Model) weightsChanged() {
	if m.dh != nil {
		m.dh.fresh = false
	}
}

// headProduct leaves the logits of b's B rows of b.ln in b.lgt (B × V):
// from the packed halves when this call packed the head, else
// kern.MatMulNT on the [V, d] head. With split (one request) the two
// halves run on two goroutines; no logit's chain changes.
func (m *Model) headProduct(b *decodeBuf, B int, split bool) {
	d, V := m.cfg.Dim, m.cfg.Vocab
	out, x := b.lgt, b.ln
	if m.dh == nil || !m.dh.on {
		if B == 1 && split {
			h := V / 2
			done := make(chan struct{})
			go func() {
				kern.MatMulNT(out[h:V], x, m.p.head[h*d:], 1, d, V-h, false)
				close(done)
			}()
			kern.MatMulNT(out[:h], x, m.p.head, 1, d, h, false)
			<-done
			return
		}
		kern.MatMulNT(out, x, m.p.head, B, d, V, false)
		return
	}
	dh := m.dh
	h := dh.half
	if B == 1 {
		// one row: the halves land in place
		if split {
			done := make(chan struct{})
			go func() {
				kern.MatMulPacked(out[h:V], x, 1, &dh.pk[1], false)
				close(done)
			}()
			kern.MatMulPacked(out[:h], x, 1, &dh.pk[0], false)
			<-done
			return
		}
		kern.MatMulPacked(out[:h], x, 1, &dh.pk[0], false)
		kern.MatMulPacked(out[h:V], x, 1, &dh.pk[1], false)
		return
	}
	// several rows: each half is B × cols in b.tmp, then interleaved
	if len(b.tmp) < b.B*V {
		b.tmp = make([]float32, b.B*V)
	}
	t0, t1 := b.tmp[:B*h], b.tmp[B*h:B*V]
	kern.MatMulPacked(t0, x, B, &dh.pk[0], false)
	kern.MatMulPacked(t1, x, B, &dh.pk[1], false)
	for i := range B {
		copy(out[i*V:i*V+h], t0[i*h:(i+1)*h])
		copy(out[i*V+h:(i+1)*V], t1[i*(V-h):(i+1)*(V-h)])
	}
}
