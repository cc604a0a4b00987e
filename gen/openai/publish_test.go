package openai

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/server"
)

// TestRestartedServerRepublished: a server restarted with its initial
// weights (a lower version) gets no call until the client has published
// the current version to it again; every call is answered by the
// published version.
func TestRestartedServerRepublished(t *testing.T) {
	fa, fb := server.NewFake(1), server.NewFake(1)
	sa, _ := server.New(fa.Backend("tinylm"), server.Options{})
	sb, _ := server.New(fb.Backend("tinylm"), server.Options{})
	a, b := &killable{h: sa}, &killable{h: sb}
	a.start(t)
	b.start(t)
	t.Cleanup(func() { a.kill() })
	t.Cleanup(b.kill)
	c := newClient(t, []string{"http://" + a.addr, "http://" + b.addr}, Options{})
	if err := c.Publish(t.Context(), "/weights", 2); err != nil {
		t.Fatal(err)
	}
	run := func() {
		t.Helper()
		reqs := make([]gen.Request, 16)
		for i := range reqs {
			reqs[i] = req(uint64(i))
		}
		res, err := c.Generate(t.Context(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Version != 2 {
				t.Fatalf("call %d answered by version %d, want 2", i, r.Version)
			}
		}
	}
	run()
	// Restart a quickly, as `longhaul serve` without --weights comes back:
	// a fresh process serving its initial weights.
	a.kill()
	fa2 := server.NewFake(1)
	sa2, _ := server.New(fa2.Backend("tinylm"), server.Options{})
	a.h = sa2
	a.start(t)
	for range 20 {
		run()
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, func() bool { return fa2.Version() == 2 })
	run()
	if c.ServedVersion("http://"+a.addr) != 2 {
		t.Fatalf("client tracks version %d for the restarted server", c.ServedVersion("http://"+a.addr))
	}
}

// TestPublishUnreachableIsError: publishing when no server can be reached
// is an error naming the servers, not nil.
func TestPublishUnreachableIsError(t *testing.T) {
	ts, _ := newLonghaul(t, nil, 1)
	ts.Close()
	c := newClient(t, []string{ts.URL}, Options{MaxOutage: 100 * time.Millisecond})
	err := c.Publish(t.Context(), "/weights", 2)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.Failed[ts.URL] == nil {
		t.Fatalf("publish to a dead server: %v", err)
	}
}

// TestExpectFencesCalls: a call answered by a version outside the expected
// range is refused as an infra failure (ErrVersion), never returned.
func TestExpectFencesCalls(t *testing.T) {
	ts, _ := newLonghaul(t, nil, 4)
	c := newClient(t, []string{ts.URL}, Options{MaxOutage: 200 * time.Millisecond})
	if _, err := c.Generate(t.Context(), []gen.Request{req(1)}); err != nil {
		t.Fatal(err)
	}
	c.Expect(5, 5)
	_, err := c.Generate(t.Context(), []gen.Request{req(1)})
	if !errors.Is(err, ErrVersion) || failure.ClassOf(err) != failure.Infra {
		t.Fatalf("call served by version 4 when 5 is expected: %v", err)
	}
	c.Expect(3, 4)
	if _, err := c.Generate(t.Context(), []gen.Request{req(1)}); err != nil {
		t.Fatalf("within the window: %v", err)
	}
}

// TestPublishWaitsOutOutage: a publish while the only server is away (a
// restart) waits for it, up to MaxOutage, instead of failing the run; the
// server that comes back confirms the version.
func TestPublishWaitsOutOutage(t *testing.T) {
	fa := server.NewFake(1)
	sa, _ := server.New(fa.Backend("tinylm"), server.Options{})
	a := &killable{h: sa}
	a.start(t)
	c := newClient(t, []string{"http://" + a.addr}, Options{MaxOutage: 10 * time.Second})
	a.kill()
	// The restarted server (its reload bumps the fake's version to 3).
	fa2 := server.NewFake(2)
	sa2, _ := server.New(fa2.Backend("tinylm"), server.Options{})
	a2 := &killable{h: sa2, addr: a.addr}
	t.Cleanup(func() { a2.kill() })
	back := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		a2.start(t)
		close(back)
	}()
	t0 := time.Now()
	if err := c.Publish(t.Context(), "/weights", 3); err != nil {
		t.Fatalf("publish across a 300ms outage: %v", err)
	}
	<-back
	if d := time.Since(t0); d < 250*time.Millisecond {
		t.Fatalf("publish returned after %v, before the server was back", d)
	}
	if v := c.ServedVersion("http://" + a.addr); v != 3 {
		t.Fatalf("the server that came back serves version %d, want 3", v)
	}
}

// TestRestartWithPublishedLabelIsCaught: a server restarted with initial
// weights whose label is the published version (`longhaul serve --model
// DIR` labels DIR version 0, as a run labels its warm-started weights) is
// told apart by the process name every answer carries
// (server.InstanceHeader): no answer of it is accepted until the client
// has published to it again, and then it serves. The restarted server
// marks its answers until it is reloaded (a logprob no fake gives). The
// restart falls between two calls, so no call fails; with a slow prober
// a call usually meets the restarted server first, and the health answer
// that follows must not make it fresh again by its label.
func TestRestartWithPublishedLabelIsCaught(t *testing.T) {
	fa, fb := server.NewFake(0), server.NewFake(0)
	sa, _ := server.New(fa.Backend("tinylm"), server.Options{})
	sb, _ := server.New(fb.Backend("tinylm"), server.Options{})
	a, b := &killable{h: sa}, &killable{h: sb}
	a.start(t)
	b.start(t)
	t.Cleanup(func() { a.kill() })
	t.Cleanup(b.kill)
	c := newClient(t, []string{"http://" + a.addr, "http://" + b.addr}, Options{ProbeInterval: 300 * time.Millisecond})
	if err := c.Publish(t.Context(), "/weights", 1); err != nil {
		t.Fatal(err)
	}
	const marker = -7.5
	run := func() {
		t.Helper()
		reqs := make([]gen.Request, 16)
		for i := range reqs {
			reqs[i] = req(uint64(i))
		}
		res, err := c.Generate(t.Context(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Version != 1 || slices.Contains(r.Logprobs, marker) {
				t.Fatalf("call %d accepted from version %d, marked %v: the restarted server's initial weights were served", i, r.Version, slices.Contains(r.Logprobs, marker))
			}
		}
	}
	run()
	a.kill()
	fa2 := server.NewFake(1)
	re := &relabel{v: 1}
	txt := server.ByteText()
	sa2, _ := server.New(server.Backend{Gen: markGen{fa2, re, marker}, Loader: re, Model: "tinylm",
		Version: func() int64 { return 1 }, MaxModelLen: 4096, Text: &txt}, server.Options{})
	a.h = sa2
	a.start(t)
	deadline := time.Now().Add(5 * time.Second)
	for !re.reloaded.Load() || fa2.Calls() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted server was not caught up and used again (reloaded %v, %d batches)", re.reloaded.Load(), fa2.Calls())
		}
		run()
		time.Sleep(5 * time.Millisecond)
	}
	run()
}

// relabel is a weight loader whose reload keeps the label v: the run's
// version, which a restarted server's initial weights also carry.
type relabel struct {
	v        int64
	reloaded atomic.Bool
}

func (r *relabel) Reload(context.Context, string) (int64, error) {
	r.reloaded.Store(true)
	return r.v, nil
}

// markGen sets every logprob of its generator's answers to mark until re
// was reloaded.
type markGen struct {
	g    gen.Generator
	re   *relabel
	mark float32
}

func (m markGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	res, err := m.g.Generate(ctx, reqs)
	if m.re.reloaded.Load() {
		return res, err
	}
	for i := range res {
		for j := range res[i].Logprobs {
			res[i].Logprobs[j] = m.mark
		}
	}
	return res, err
}

// TestPublishSurvivesServerKilledMidReload: a server that dies while it
// handles the reload (its connection closed with no answer and its port
// refusing, as a SIGKILL during /update_weights_from_disk leaves it; here
// the in-process server is closed from inside the handler) is an outage
// to wait out, not a failed publish: the server that comes back confirms
// the version.
func TestPublishSurvivesServerKilledMidReload(t *testing.T) {
	fa := server.NewFake(1)
	sa, _ := server.New(fa.Backend("tinylm"), server.Options{})
	a := &killable{}
	killed := make(chan struct{})
	var once sync.Once
	a.h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/update_weights") {
			first := false
			once.Do(func() { first = true })
			if first {
				a.kill()
				close(killed)
				return
			}
		}
		sa.ServeHTTP(w, r)
	})
	a.start(t)
	c := newClient(t, []string{"http://" + a.addr}, Options{MaxOutage: 10 * time.Second})
	fa2 := server.NewFake(2)
	sa2, _ := server.New(fa2.Backend("tinylm"), server.Options{})
	a2 := &killable{h: sa2, addr: a.addr}
	t.Cleanup(func() {
		if a2.srv != nil {
			a2.kill()
		}
	})
	back := make(chan struct{})
	go func() {
		<-killed
		time.Sleep(300 * time.Millisecond)
		a2.start(t)
		close(back)
	}()
	if err := c.Publish(t.Context(), "/weights", 3); err != nil {
		t.Fatalf("publish across a server killed mid-reload: %v", err)
	}
	<-back
	if v := c.ServedVersion("http://" + a.addr); v != 3 {
		t.Fatalf("the server that came back serves version %d, want 3", v)
	}
}
