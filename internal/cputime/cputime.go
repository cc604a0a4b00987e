// Package cputime reads the process's CPU time, for the generation phase's
// cores (gen_cpu_s) and for benchmarks that report CPU per unit of work.
package cputime

import (
	"syscall"
	"time"
)

// Process is the process's user + system CPU time over every thread so
// far (0 when getrusage fails).
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
