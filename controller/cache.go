package controller

// This file holds the event cache: a copy, per rollout, of its events in
// the log, so that the train effect reads a step's training data without
// reading each event back from the log. No decision reads it: the planner
// reads only the folded state.

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/longhaul-rl/longhaul/runlog"
)

// eventCache holds, per rollout, the events of its current attempt as the
// log holds them. It is a view of the log, not a second source:
//
//   - an attempt seeds its entry from the log itself (Log.RolloutEvents)
//     when it starts, after its AttemptStarted is durable (the loop appends
//     before it launches);
//   - every later entry is an event the log accepted for that rollout
//     (Record or Stage returned nil), added by the attempt's one goroutine
//     in the order it appended them (a staged one is made durable before
//     any step trains on it, or the run fails);
//   - anything else appended for the rollout (the planner's record of a
//     deadline, a regeneration, the next AttemptStarted) comes after the
//     attempt ended and is followed by a new attempt, which seeds again; a
//     committed group's members all sealed in their last attempt;
//   - the entries of trained groups are dropped at StepTrained, so a step
//     a trainer recovery rewinds is read from the log.
//
// With verify set (the package's tests), every read is checked against
// the log, event by event in its encoding (rolloutEvents).
type eventCache struct {
	mu     sync.Mutex
	m      map[runlog.RolloutID][]runlog.Event
	verify bool
}

// seed starts a rollout's entry with its events in the log.
func (c *eventCache) seed(id runlog.RolloutID, prior []runlog.Event) {
	c.mu.Lock()
	// Room for a typical attempt's events (a call, an env step and now
	// and then a compaction per turn), so the entry does not regrow on
	// every few appends.
	c.m[id] = append(make([]runlog.Event, 0, len(prior)+64), prior...)
	c.mu.Unlock()
}

// add appends events the log accepted for a rollout with an entry.
func (c *eventCache) add(id runlog.RolloutID, evs []runlog.Event) {
	c.mu.Lock()
	if cached, ok := c.m[id]; ok {
		c.m[id] = append(cached, evs...)
	}
	c.mu.Unlock()
}

func (c *eventCache) get(id runlog.RolloutID) ([]runlog.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	evs, ok := c.m[id]
	return evs, ok
}

// drop forgets the trained groups' rollouts.
func (c *eventCache) drop(groups []*runlog.Group) {
	c.mu.Lock()
	for _, g := range groups {
		for _, m := range g.Members {
			delete(c.m, m.ID)
		}
	}
	c.mu.Unlock()
}

// rolloutEvents returns a rollout's events: from the cache when this
// process logged all of them, else from the log.
func (c *Controller) rolloutEvents(id runlog.RolloutID) ([]runlog.Event, error) {
	evs, ok := c.cache.get(id)
	if !ok {
		return c.o.Log.RolloutEvents(id)
	}
	if c.cache.verify {
		logged, err := c.o.Log.RolloutEvents(id)
		if err != nil {
			return nil, err
		}
		if err := sameEvents(evs, logged); err != nil {
			return nil, fmt.Errorf("controller: the event cache of rollout %s is not the log's: %w", id, err)
		}
	}
	return evs, nil
}

// sameEvents compares two event lists by their encoding.
func sameEvents(a, b []runlog.Event) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d events cached, %d logged", len(a), len(b))
	}
	for i := range a {
		ea, err := runlog.EncodeEvent(nil, a[i])
		if err != nil {
			return err
		}
		eb, err := runlog.EncodeEvent(nil, b[i])
		if err != nil {
			return err
		}
		if !bytes.Equal(ea, eb) {
			return fmt.Errorf("event %d: cached %T, logged %T differ", i, a[i], b[i])
		}
	}
	return nil
}
