package controller

// This file holds strict version fencing in deterministic mode: the
// schedule names exactly one version for every call of a step, so the
// generator is told to refuse any other.

// Fencer is what a generator offers to refuse answers of the wrong
// weights (gen/openai.Client.Expect): a call answered by a version
// outside [lo, hi] is an infra failure of the server that answered it,
// which is then brought to the published version before it serves again.
type Fencer interface {
	Expect(lo, hi int64)
}

// fence narrows the generator's accepted versions to v in deterministic
// mode, where generation and training alternate and every call made
// while v is published is due at v (DESIGN.md, "Determinism"). Without
// it a server that came back serving older weights (a `longhaul serve`
// restarted without --weights serves version 0) would be accepted while
// within the client's default window of one version behind, and its
// calls would be trained as if they were the schedule's. Throughput mode
// keeps the client's window: its calls may lag by design.
func (c *Controller) fence(v int64) {
	if c.o.Fence == nil || c.cfg.Run.Mode != "deterministic" {
		return
	}
	c.o.Fence.Expect(v, v)
}
