// Package race reports whether the race detector is on, so tests that
// train for minutes can skip themselves under -race and run in their own
// CI step instead.
package race

// Enabled is true in binaries built with -race.
const Enabled = enabled
