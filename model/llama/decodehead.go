package llama

import "github.com/longhaul-rl/longhaul/internal/kern"

// The decode head. kern's products pack their B operand into panels, and
// for MatMulNT (the head stored [V, d] as HF does) that packing is a
// transpose of the whole V×d matrix on every call: profiled at batch 16 on
// a 151,936-token vocabulary it was 45% of generation time, more than the
// product itself. So Generate keeps the head transposed, (d, V) in two
// column blocks (one per goroutine of a single request's split decode),
// for kern.MatMul, whose packing is a plain copy. Each logit is still one
// kern chain over d in the same order, so the sampler's logprobs stay the
// trainer's bit for bit. The copy costs V·d floats while generating (26%
// of Qwen3-0.6B's weights) and is rebuilt after the weights change.

// decodeHead is the transposed head: cols[0] is (d, split), cols[1] is
// (d, V−split).
type decodeHead struct {
	split int
	cols  [2][]float32
}

// headT returns the transposed head, building it if the weights changed
// since (Generate is not safe for concurrent use, as before).
func (m *Model) headT() *decodeHead {
	if m.dh != nil {
		return m.dh
	}
	d, V := m.cfg.Dim, m.cfg.Vocab
	h := V / 2
	dh := &decodeHead{split: h}
	for bi, r := range [2][2]int{{0, h}, {h, V}} {
		w := r[1] - r[0]
		t := make([]float32, d*w)
		for j := range w {
			row := m.p.head[(r[0]+j)*d : (r[0]+j+1)*d]
			for p, v := range row {
				t[p*w+j] = v
			}
		}
		dh.cols[bi] = t
	}
	m.dh = dh
	return dh
}

// dropHead forgets the transposed head (the weights changed).
func (m *Model) dropHead() { m.dh = nil }

// headLogits writes the logits of the B rows of ln into lgt (B, V).
func (m *Model) headLogits(lgt, ln []float32, B int, split bool) {
	d, V := m.cfg.Dim, m.cfg.Vocab
	dh := m.headT()
	h := dh.split
	if B == 1 && split {
		// One sequence: the two column blocks on two goroutines.
		done := make(chan struct{})
		go func() {
			kern.MatMul(lgt[h:V], ln, dh.cols[1], 1, d, V-h, false)
			close(done)
		}()
		kern.MatMul(lgt[:h], ln, dh.cols[0], 1, d, h, false)
		<-done
		return
	}
	if B == 1 {
		kern.MatMul(lgt[:h], ln, dh.cols[0], 1, d, h, false)
		kern.MatMul(lgt[h:V], ln, dh.cols[1], 1, d, V-h, false)
		return
	}
	// Each block's product is (B, width); gather them into rows of lgt.
	tmp := make([]float32, B*max(h, V-h))
	for bi, r := range [2][2]int{{0, h}, {h, V}} {
		w := r[1] - r[0]
		kern.MatMul(tmp[:B*w], ln, dh.cols[bi], B, d, w, false)
		for i := range B {
			copy(lgt[i*V+r[0]:i*V+r[1]], tmp[i*w:(i+1)*w])
		}
	}
}
