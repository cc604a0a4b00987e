package runlog

import (
	"context"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/store"
)

// ReadRollouts folds the run directory's log read-only (like Inspect: no
// lock, no repair) and returns the state and the events of every rollout
// keep accepts, in log order with their tokens materialized. It is what
// `longhaul inspect` lists and shows rollouts from.
func ReadRollouts(ctx context.Context, dir string, keep func(RolloutID) bool) (*State, map[RolloutID][]Event, error) {
	evs := map[RolloutID][]Event{}
	s, _, _, err := readOnlyFold(ctx, dir, func(_ Offset, ev Event) error {
		if keep == nil {
			return nil
		}
		if id, ok := eventRollout(ev); ok && keep(id) {
			evs[id] = append(evs[id], ev)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	br := &blobReader{fs: store.OS, dir: filepath.Join(dir, logSubdir)}
	defer br.close()
	for id, list := range evs {
		for i, ev := range list {
			if list[i], err = materialize(br, ev); err != nil {
				return nil, nil, err
			}
		}
		evs[id] = list
	}
	return s, evs, nil
}
