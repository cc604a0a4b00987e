package controller

import (
	"syscall"
	"time"
)

// processCPU is the process's user + system CPU time, every thread: the
// generation phase's cores are this over its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
