//go:build race

package race

const enabled = true
