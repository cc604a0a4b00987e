//go:build !race

package llama

const raceEnabled = false
