package model

import "sync"

// kvPool keeps KV caches between Generate calls. A model and its clones
// share one: the RL loop publishes every new version as a fresh Clone, and
// with a pool per model each version's first call allocated and zeroed a
// cache per request again (64 × 0.4 MB for the default run, on the serial
// path of generation, plus the garbage). A cache's contents never carry
// over: every position is written before it is read.
type kvPool struct {
	mu   sync.Mutex
	free [][]layerKV
}

// get returns a cache for c from the pool, or a new one.
func (p *kvPool) get(c Config) []layerKV {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		kv := p.free[n-1]
		p.free = p.free[:n-1]
		return kv
	}
	return newKV(c, true)
}

// put keeps a cache for later calls, up to maxPooledKV.
func (p *kvPool) put(kv []layerKV) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxPooledKV {
		p.free = append(p.free, kv)
	}
}
