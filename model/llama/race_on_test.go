//go:build race

package llama

const raceEnabled = true
