// The prefix cache: KV state kept across Generate calls, so that a prompt
// extending a sequence an earlier call computed (an RL rollout's next turn:
// the previous prompt + its completion + the environment's observation)
// prefills only its new tokens.

package model

import "slices"

// defaultPrefixBudget bounds the bytes of KV caches the prefix cache keeps
// for a model and its clones. An entry holds a whole cache, 3·L·T·K·hd·4
// bytes: 384 KiB for the default model (170 entries fit: the default run's
// 64 rollouts with room for the sequences compactions and finished
// rollouts leave behind), 6 MiB for model B (L4 d256 ctx512: 10 entries).
const defaultPrefixBudget = 64 << 20

// prefixEntry is one sequence an earlier call computed: its cache holds k,
// v and the transposed keys of every position of toks, computed by the
// weights of key.
type prefixEntry struct {
	key   uint64
	toks  []int32
	kv    *kvCache
	bytes int64
	used  uint64 // LRU time of the last insert or use
}

func kvBytes(kv *kvCache) int64 {
	var n int
	for _, l := range kv.l {
		n += len(l.k) + len(l.v) + len(l.kt)
	}
	return 4 * int64(n)
}

// SetPrefixCache sets the bytes of KV caches kept across Generate calls for
// m and its clones (they share the budget, not the entries); 0 turns the
// prefix cache off. The default is 64 MiB. Results do not depend on it.
func (m *Model) SetPrefixCache(bytes int64) {
	p := m.kv
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget = max(bytes, 0)
	p.evict()
}

// PrefixCache is the byte budget SetPrefixCache set (shared with clones).
func (m *Model) PrefixCache() int64 {
	p := m.kv
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.budget
}

// prefixKey names m's current weights in the pool: a clone gets its own
// key, and a change of the weights (wver) a new one, after dropping the
// entries of the old. Entries are only ever matched under their own key,
// so a cache is never reused by other weights.
func (m *Model) prefixKey() uint64 {
	if m.pkey != 0 && m.pkeyVer == m.wver {
		return m.pkey
	}
	p := m.kv
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.pkey != 0 {
		for i := 0; i < len(p.entries); {
			if p.entries[i].key == m.pkey {
				p.put(p.remove(i))
				continue
			}
			i++
		}
	}
	p.keys++
	m.pkey, m.pkeyVer = p.keys, m.wver
	return m.pkey
}

// seed gives every request of a call its KV cache. A request whose prompt
// shares at least as many positions with an entry of key as with an earlier
// request of the call (shared[i], from parent[i]) starts from that entry
// instead and becomes a root of the call's prefix trees (parent −1). Like
// the in-batch rule, the cover stops one short of the whole prompt: the
// last position is recomputed for its logits, which are not kept. An entry
// the prompt extends whole is taken as it is (the call's longer sequence
// replaces it afterwards); one it shares only part of is copied and stays.
// Returns the positions seeded from entries.
func (p *kvPool) seed(key uint64, seqs []*genSeq, parent, shared []int, c kvDims, ctx int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	seeded := 0
	for i, s := range seqs {
		pr := s.req.Prompt
		best, bl := -1, 0
		for j, e := range p.entries {
			if e.key != key {
				continue
			}
			if l := lcp(pr, e.toks); l > bl {
				best, bl = j, l
			}
		}
		cover := min(bl, len(pr)-1)
		if best < 0 || cover == 0 || cover < shared[i] {
			s.kv = p.get(key, s.need, ctx)
			continue
		}
		e := p.entries[best]
		p.clock++
		e.used = p.clock
		if bl == len(e.toks) && e.kv.T >= s.need {
			s.kv = p.remove(best)
		} else {
			s.kv = p.get(key, s.need, ctx)
			copyKV(s.kv, e.kv, cover, c)
		}
		parent[i], shared[i] = -1, cover
		seeded += cover
	}
	return seeded
}

// keep makes each finished sequence of a call (its prompt and the sampled
// tokens decode fed: s.pos positions) an entry of key, or returns its
// cache to the spares when the budget cannot hold one. The call owns its
// caches until they are inserted, so their keys are laid out before the
// pool is locked: the other lane's calls need the lock meanwhile.
func (p *kvPool) keep(key uint64, seqs []*genSeq, c kvDims) {
	p.mu.Lock()
	budget := p.budget
	p.mu.Unlock()
	ents := make([]*prefixEntry, len(seqs))
	for i, s := range seqs {
		if size := kvBytes(s.kv); budget >= size {
			n := len(s.req.Prompt)
			toks := make([]int32, s.pos)
			copy(toks, s.req.Prompt)
			copy(toks[n:], s.res.Tokens[:s.pos-n])
			// decode writes only the transposed keys; prefill's forward
			// and copyKV read the rows (a few positions per call)
			untransposeKeys(s.kv, n, s.pos, c)
			ents[i] = &prefixEntry{key: key, toks: toks, kv: s.kv, bytes: size}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range seqs {
		kv := s.kv
		s.kv = nil
		if ents[i] == nil || p.budget < ents[i].bytes {
			p.put(kv)
			continue
		}
		p.insert(ents[i])
	}
}

// insert adds e, keeping no entry of a key that is a prefix of another
// (the longer one serves every lookup the shorter would), then evicts the
// least recently used entries past the budget.
func (p *kvPool) insert(e *prefixEntry) {
	p.clock++
	for i := 0; i < len(p.entries); {
		o := p.entries[i]
		if o.key == e.key {
			l := lcp(o.toks, e.toks)
			if l == len(e.toks) { // o holds all of e already
				o.used = p.clock
				p.put(e.kv)
				return
			}
			if l == len(o.toks) {
				p.put(p.remove(i))
				continue
			}
		}
		i++
	}
	e.used = p.clock
	p.entries = append(p.entries, e)
	p.bytes += e.bytes
	p.evict()
}

// evict drops least recently used entries until the budget holds.
func (p *kvPool) evict() {
	for p.bytes > p.budget {
		p.put(p.remove(p.lru(func(*prefixEntry) bool { return true })))
	}
}

// lru is the index of the least recently used entry satisfying ok, or −1.
func (p *kvPool) lru(ok func(*prefixEntry) bool) int {
	best := -1
	for i, e := range p.entries {
		if ok(e) && (best < 0 || e.used < p.entries[best].used) {
			best = i
		}
	}
	return best
}

// remove takes entry i out of the cache and returns its KV cache.
func (p *kvPool) remove(i int) *kvCache {
	e := p.entries[i]
	p.entries = slices.Delete(p.entries, i, i+1)
	p.bytes -= e.bytes
	return e.kv
}

// untransposeKeys fills the key rows of positions [p0, p1) from the
// transposed keys (transposeKeys' inverse).
func untransposeKeys(kv *kvCache, p0, p1 int, c kvDims) {
	eachKeyRow(kv, p0, p1, c, func(row, kt []float32, pos int) {
		for p := range row {
			row[p] = kt[ktAt(len(row), pos, p)]
		}
	})
}
