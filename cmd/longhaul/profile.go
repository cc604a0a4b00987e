package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startCPUProfile profiles the whole process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "longhaul: --cpu-profile %s: %v\n", path, err)
		}
	}, nil
}

// startTrace writes the runtime's execution trace of the whole process to
// path until stop is called: where goroutines wait and for how long, which
// a CPU profile cannot show (go tool trace reads it; -pprof=sched gives the
// waits for a CPU, -pprof=sync and -pprof=syscall the blocking).
func startTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--trace %s: %w", path, err)
	}
	return func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "longhaul: --trace %s: %v\n", path, err)
		}
	}, nil
}
