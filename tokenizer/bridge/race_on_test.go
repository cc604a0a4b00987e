//go:build race

package bridge

// raceEnabled: the race detector's instrumentation changes allocations and
// multiplies the cost of building long conversations, so the allocation
// checks run in the plain test step (.ci/steps/13-tokenizers.sh) instead.
const raceEnabled = true
