//go:build race

package model

// raceEnabled shrinks the slowest checks under the race detector, which
// makes the scalar loops here about 15× slower.
const raceEnabled = true
