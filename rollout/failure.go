package rollout

import "errors"

// ErrDiverged marks a resume whose recomputation disagrees with the logged
// events (a non-deterministic environment or a changed config).
var ErrDiverged = errors.New("rollout: resume diverged from the log")

// ErrSelectionExhausted is returned when every resample was rejected.
var ErrSelectionExhausted = errors.New("rollout: selection exhausted its resampling budget")
