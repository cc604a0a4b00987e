package httpenv

import "sync"

// storedStep is the answer to one idempotency key: the reply and, for an
// environment that can snapshot, its state after the step. A reset key is
// stored with no reply.
type storedStep struct {
	reply *StepReply
	state []byte
}

// keyStore remembers answers by key, forgetting the oldest beyond a bound
// (a key is repeated only by the resume of a recent step).
type keyStore struct {
	mu    sync.Mutex
	m     map[string]storedStep
	order []string
}

func (k *keyStore) get(key string) (storedStep, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.m[key]
	return st, ok
}

func (k *keyStore) seen(key string) bool {
	_, ok := k.get(key)
	return ok
}

func (k *keyStore) put(key string, st storedStep, limit int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[key]; !ok {
		k.order = append(k.order, key)
	}
	k.m[key] = st
	for len(k.order) > limit {
		delete(k.m, k.order[0])
		k.order = k.order[1:]
	}
}

// Keys returns the number of stored keys.
func (s *Server) Keys() int {
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	return len(s.keys.m)
}
