package model

import (
	"slices"
	"sync"
)

// kvPool keeps KV caches between Generate calls. A model and its clones
// share one: the RL loop publishes every new version as a fresh Clone, and
// with a pool per model each version's first call allocated and zeroed a
// cache per request again (64 × 0.4 MB for the default run, on the serial
// path of generation, plus the garbage). A spare cache's contents never
// carry over: every position is written before it is read. The pool also
// holds the prefix cache (prefixcache.go): caches kept whole, with the
// sequence they hold, for later calls of the same weights.
type kvPool struct {
	mu   sync.Mutex
	cfg  Config // of the model and its clones
	free []*kvCache

	entries []*prefixEntry // the prefix cache, at most budget bytes of caches
	budget  int64          // bytes; 0 turns the prefix cache off
	bytes   int64          // held by entries
	clock   uint64         // LRU time: bumped by every use and insert
	keys    uint64         // the last weights key handed out (newKey)
}

func newKVPool(cfg Config) *kvPool { return &kvPool{cfg: cfg, budget: defaultPrefixBudget} }

// kvCapacity is the positions a cache for a request needing need of a
// context of ctx gets: the whole context for small contexts (every cache
// then fits every request, as the pool's spares must), else need rounded
// up to 256 (a cache of a 4096-position context is 1.4 GB for a
// 0.6B-shaped model).
func kvCapacity(need, ctx int) int {
	if ctx <= 1024 {
		return ctx
	}
	return min(ctx, (need+255)/256*256)
}

// get returns a cache of at least need positions of a context of ctx: a
// spare one, else the least recently used prefix entry of other weights
// than key (a stale version's or another clone's; taking it saves
// allocating and zeroing a cache while the entries of a version nobody
// generates with any more sit idle), else a new one. The caller holds
// p.mu.
func (p *kvPool) get(key uint64, need, ctx int) *kvCache {
	for i := len(p.free) - 1; i >= 0; i-- {
		if kv := p.free[i]; kv.T >= need {
			p.free = slices.Delete(p.free, i, i+1)
			return kv
		}
	}
	if i := p.lru(func(e *prefixEntry) bool { return e.key != key && e.kv.T >= need }); i >= 0 {
		return p.remove(i)
	}
	return newKV(p.cfg, kvCapacity(need, ctx), true)
}

// put keeps a cache for later calls, up to maxPooledKV. The caller holds
// p.mu.
func (p *kvPool) put(kv *kvCache) {
	if len(p.free) < maxPooledKV {
		p.free = append(p.free, kv)
	}
}

// putAll returns caches to the pool.
func (p *kvPool) putAll(seqs []*genSeq) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range seqs {
		if s.kv != nil {
			p.put(s.kv)
			s.kv = nil
		}
	}
}
