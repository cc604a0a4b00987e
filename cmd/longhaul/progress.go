package main

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/metrics"
)

// tracker is what the progress display knows: the phase (warm start,
// then training), counts, the last step's metrics, and a live in-flight
// count read when a line is drawn. Its methods are called from the run's
// goroutines and the display's.
type tracker struct {
	mu             sync.Mutex
	now            func() time.Time
	start          time.Time
	wsDone, wsAll  int
	wsStart        time.Time
	step, maxSteps int64
	first          int64 // the first step this process trained, -1 before
	firstAt        time.Time
	last           metrics.Step
	live           func() int64
}

func newTracker(maxSteps int64, now func() time.Time) *tracker {
	return &tracker{now: now, start: now(), maxSteps: maxSteps, first: -1}
}

func (t *tracker) warmStart(done, total int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wsAll == 0 {
		t.wsStart = t.now()
	}
	t.wsDone, t.wsAll = done, total
}

func (t *tracker) progress(p controller.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first < 0 {
		// The rate counts from the end of the step before this one, so
		// the first step's time is its own.
		t.first, t.firstAt = p.Step-1, t.now().Add(-time.Duration(p.Metrics.StepSeconds*float64(time.Second)))
	}
	t.step, t.last = p.Step, p.Metrics
}

func (t *tracker) setLive(f func() int64) {
	t.mu.Lock()
	t.live = f
	t.mu.Unlock()
}

// rate is steps per second over the steps this process trained.
func (t *tracker) rate() float64 {
	if t.first < 0 || t.step <= t.first {
		return 0
	}
	return float64(t.step-t.first) / t.now().Sub(t.firstAt).Seconds()
}

func eta(left, perSecond float64) string {
	if perSecond <= 0 || math.IsInf(perSecond, 0) {
		return "?"
	}
	return fmtDur(time.Duration(left / perSecond * float64(time.Second)))
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= time.Hour {
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// warmLine and stepLine are the text after each bar, and the plain lines.
func (t *tracker) warmLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	el := t.now().Sub(t.wsStart)
	r := float64(t.wsDone) / el.Seconds()
	return fmt.Sprintf("%.1f steps/s  elapsed %s  eta %s", r, fmtDur(el), eta(float64(t.wsAll-t.wsDone), r))
}

func (t *tracker) stepLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rate()
	inFlight := int64(0)
	if t.live != nil {
		inFlight = t.live()
	}
	l := t.last
	return fmt.Sprintf("%.2f steps/s  elapsed %s  eta %s  reward %.3f  success %.1f%%  compactions/rollout %.2f  in flight %d  gen %.0f tok/s",
		r, fmtDur(t.now().Sub(t.start)), eta(float64(t.maxSteps-t.step), r), l.RewardMean, 100*l.SuccessRate,
		l.CompactionsPerRollout, inFlight, l.GenTokensPerSecond)
}

// plainLine is one line of the pipe mode: the phase and its numbers.
func (t *tracker) plainLine() string {
	t.mu.Lock()
	ws := t.wsAll > 0 && t.wsDone < t.wsAll && t.first < 0
	wsDone, wsAll, step, max := t.wsDone, t.wsAll, t.step, t.maxSteps
	started := t.first >= 0
	t.mu.Unlock()
	switch {
	case ws:
		return fmt.Sprintf("warm start %d/%d (%.0f%%)  %s", wsDone, wsAll, 100*float64(wsDone)/float64(wsAll), t.warmLine())
	case !started:
		return fmt.Sprintf("starting (step %d/%d): restoring, warm start or first step's rollouts", step, max)
	}
	return fmt.Sprintf("step %d/%d (%.0f%%)  %s", step, max, 100*float64(step)/float64(max), t.stepLine())
}

// display draws a tracker: bars on a terminal, plain lines every interval
// otherwise.
type display struct {
	t    *tracker
	p    *mpb.Progress
	ws   *mpb.Bar
	bar  *mpb.Bar
	mu   sync.Mutex
	quit chan struct{}
	done chan struct{}
}

// newBars draws the warm start's bar (added when it starts) and the steps'.
func newBars(t *tracker, out io.Writer) *display {
	d := &display{t: t, p: mpb.New(mpb.WithOutput(out), mpb.WithWidth(30))}
	d.bar = d.p.AddBar(t.maxSteps,
		mpb.PrependDecorators(decor.Name("train      "), decor.CountersNoUnit("%d/%d")),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return t.stepLine() })))
	return d
}

func (d *display) warmStart(done, total int) {
	d.t.warmStart(done, total)
	if d.p == nil {
		return
	}
	d.mu.Lock()
	if d.ws == nil {
		d.ws = d.p.AddBar(int64(total), mpb.BarPriority(-1), mpb.BarRemoveOnComplete(),
			mpb.PrependDecorators(decor.Name("warm start "), decor.CountersNoUnit("%d/%d")),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return d.t.warmLine() })))
	}
	d.ws.SetCurrent(int64(done))
	d.mu.Unlock()
}

func (d *display) progress(p controller.Progress) {
	d.t.progress(p)
	if d.bar != nil {
		d.bar.SetCurrent(p.Step)
	}
}

// newPlain prints t.plainLine() to out every interval until stop.
func newPlain(t *tracker, out io.Writer, interval time.Duration) *display {
	d := &display{t: t, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-d.quit:
				return
			case <-tick.C:
				fmt.Fprintln(out, "progress:", t.plainLine())
			}
		}
	}()
	return d
}

// stop ends the display; failed aborts the bars instead of completing them.
func (d *display) stop(failed bool) {
	if d.p != nil {
		d.mu.Lock()
		if d.ws != nil && failed {
			d.ws.Abort(true)
		}
		d.mu.Unlock()
		if failed {
			d.bar.Abort(false)
		}
		d.p.Wait()
	}
	if d.quit != nil {
		close(d.quit)
		<-d.done
	}
}
