package faultproxy

import (
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Request is what a Plan sees of one proxied request. Body is the whole
// request body (already read); a Plan must not modify it.
type Request struct {
	Seq    int64 // 0-based arrival order over all requests the proxy saw
	Method string
	Path   string
	Query  string // the raw query (an S3 part upload's "partNumber=2&uploadId=...")
	Body   []byte
}

// A Plan decides which fault, if any, to inject into one request. Decide
// is called once per request, concurrently; a Plan with state (counters,
// a random stream) guards it itself.
type Plan interface {
	Decide(r *Request) Fault
}

// PlanFunc adapts a function to a Plan.
type PlanFunc func(r *Request) Fault

// Decide calls f.
func (f PlanFunc) Decide(r *Request) Fault { return f(r) }

// Never injects nothing: a plain reverse proxy.
func Never() Plan { return PlanFunc(func(*Request) Fault { return None }) }

// Every injects f into the n-th, 2n-th, ... request it is asked about
// (n ≥ 1; n = 1 is every request).
func Every(n int, f Fault) Plan { return Cycle(n, f) }

// Cycle injects faults in turn into every n-th request it is asked about:
// the n-th gets faults[0], the 2n-th faults[1], and so on round the list,
// so each kind is seen after n·len(faults) requests.
func Cycle(n int, faults ...Fault) Plan {
	if n < 1 {
		n = 1
	}
	var seen atomic.Int64
	return PlanFunc(func(*Request) Fault {
		if len(faults) == 0 {
			return None
		}
		k := seen.Add(1)
		if k%int64(n) != 0 {
			return None
		}
		return faults[(k/int64(n)-1)%int64(len(faults))]
	})
}

// FirstK injects f into the first k requests it is asked about.
func FirstK(k int, f Fault) Plan {
	var seen atomic.Int64
	return PlanFunc(func(*Request) Fault {
		if seen.Add(1) <= int64(k) {
			return f
		}
		return None
	})
}

// Random injects a fault with probability p into each request it is asked
// about, drawing from a stream seeded by seed; the fault is picked
// uniformly among faults. The stream is consumed in arrival order, so the
// decisions are reproducible for a serial client.
func Random(seed uint64, p float64, faults ...Fault) Plan {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 0x6661756c74))
	return PlanFunc(func(*Request) Fault {
		if len(faults) == 0 {
			return None
		}
		mu.Lock()
		defer mu.Unlock()
		if r.Float64() >= p {
			return None
		}
		return faults[r.IntN(len(faults))]
	})
}

// Sticky injects f into every request whose JSON body carries a "prompt"
// chosen with probability p by a hash of (seed, prompt): the same prompt is
// always faulted or never, so a retry of a faulted call (which resends its
// prompt) fails again and a rollout exhausts its budget. Bodies without a
// prompt are never faulted.
func Sticky(seed uint64, p float64, f Fault) Plan {
	return PlanFunc(func(r *Request) Fault {
		var body struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		if json.Unmarshal(r.Body, &body) != nil || len(body.Prompt) == 0 {
			return None
		}
		h := fnv.New64a()
		var b [8]byte
		for i := range b {
			b[i] = byte(seed >> (8 * i))
		}
		h.Write(b[:])
		h.Write(body.Prompt)
		if float64(h.Sum64()>>11)/float64(1<<53) < p {
			return f
		}
		return None
	})
}

// OnPath restricts plan to requests whose URL path is path (e.g.
// "/v1/completions"); others pass, and plan's counters do not see them.
func OnPath(path string, plan Plan) Plan {
	return PlanFunc(func(r *Request) Fault {
		if r.Path != path {
			return None
		}
		return plan.Decide(r)
	})
}

// FirstOf asks plans in order and returns the first fault one of them
// picks. Every plan up to that one sees the request.
func FirstOf(plans ...Plan) Plan {
	return PlanFunc(func(r *Request) Fault {
		for _, p := range plans {
			if f := p.Decide(r); f != None {
				return f
			}
		}
		return None
	})
}

// NthPrompt injects f into every request whose JSON body carries the k-th
// distinct "prompt" the plan has seen (1-based), for each k in ordinals:
// the chosen prompts fail on every retry, as a prompt the server cannot
// answer would, while all others pass. Bodies without a prompt pass.
func NthPrompt(f Fault, ordinals ...int) Plan {
	var mu sync.Mutex
	seen := map[string]int{}
	return PlanFunc(func(r *Request) Fault {
		var body struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		if json.Unmarshal(r.Body, &body) != nil || len(body.Prompt) == 0 {
			return None
		}
		mu.Lock()
		k, ok := seen[string(body.Prompt)]
		if !ok {
			k = len(seen) + 1
			seen[string(body.Prompt)] = k
		}
		mu.Unlock()
		for _, o := range ordinals {
			if o == k {
				return f
			}
		}
		return None
	})
}

// When restricts plan to requests keep accepts (by method or path, say);
// others pass, and plan's counters do not see them.
func When(keep func(r *Request) bool, plan Plan) Plan {
	return PlanFunc(func(r *Request) Fault {
		if !keep(r) {
			return None
		}
		return plan.Decide(r)
	})
}
