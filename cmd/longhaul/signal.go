package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// errInterrupted is the cause of the command context after a first Ctrl-C
// or SIGTERM.
var errInterrupted = errors.New("interrupted")

// interruptContext returns a context that the first SIGINT or SIGTERM
// cancels with errInterrupted, so a run stops where it is with its log
// durable (every append is fsynced before it returns; the deferred closes
// run). SIGTERM is what a scheduler sends before preemption, so it is
// treated the same. A second signal exits at once with status 130: the log
// needs no cleanup to be resumed, only the wait is skipped.
func interruptContext(parent context.Context, msg io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			fmt.Fprintf(msg, "\nlonghaul: %s: stopping; the run log is durable (press Ctrl-C again to exit at once)\n", s)
			cancel(errInterrupted)
		case <-done:
			return
		}
		select {
		case <-ch:
			fmt.Fprintln(msg, "longhaul: second interrupt: exiting now")
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interrupted reports whether ctx was cancelled by a signal.
func interrupted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errInterrupted)
}
