package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startCPUProfile profiles the whole process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	return startRecording("--cpu-profile", path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace writes the runtime's execution trace of the whole process to
// path until stop is called: where goroutines wait and for how long, which
// a CPU profile cannot show (go tool trace reads it; -pprof=sched gives the
// waits for a CPU, -pprof=sync and -pprof=syscall the blocking).
func startTrace(path string) (stop func(), err error) {
	return startRecording("--trace", path, trace.Start, trace.Stop)
}

// startRecording runs begin on a new file at path until the returned stop
// ends it with end and closes the file; errors name flag.
func startRecording(flag, path string, begin func(io.Writer) error, end func()) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := begin(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return func() {
		end()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "longhaul: %s %s: %v\n", flag, path, err)
		}
	}, nil
}
