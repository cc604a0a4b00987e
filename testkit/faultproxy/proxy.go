// Package faultproxy is a fault-injecting HTTP reverse proxy for loopback
// tests. It sits between a client (gen/openai, say) and a server (`longhaul
// serve`), forwards every request, and, where its Plan says so, answers
// with a fault instead: an error status, a stall past the client's
// deadline, a reset connection, or a broken answer (truncated, malformed,
// or with one logprob too few), or, in front of an S3 server, throttling
// (503 SlowDown). It counts what it injected, per kind.
//
//	p := faultproxy.New("http://127.0.0.1:8000",
//		faultproxy.OnPath("/v1/completions", faultproxy.Every(5, faultproxy.Status503)))
//	defer p.Close()
//	// point the client at p.URL()
package faultproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
)

// Fault is one kind of injected failure.
type Fault int

// Faults. The comment says what the client sees.
const (
	None          Fault = iota // the upstream's answer, untouched
	Status500                  // HTTP 500 with an OpenAI-style error body
	Status503                  // HTTP 503
	Status429                  // HTTP 429 with Retry-After: 0
	Status408                  // HTTP 408
	Status400                  // HTTP 400 (a request the server rejects: data)
	Timeout                    // no answer until the client gives up (or MaxHold passes, then the upstream's answer)
	Reset                      // the connection reset (RST, SO_LINGER 0) before any response byte
	Truncated                  // the upstream's status and Content-Length, half its body, then the connection closed
	Malformed                  // HTTP 200 whose body is not JSON
	ShortLogprobs              // the upstream's completion with the first choice's last logprob removed
	SlowDown                   // HTTP 503 with S3's SlowDown error (throttling), as a bucket answers
	numFaults
)

// Faults lists every fault kind an OpenAI-style server shows, None
// excepted; SlowDown is a bucket's.
var Faults = []Fault{Status500, Status503, Status429, Status408, Status400, Timeout, Reset, Truncated, Malformed, ShortLogprobs}

var faultNames = [numFaults]string{"none", "500", "503", "429", "408", "400", "timeout", "reset", "truncated", "malformed", "short-logprobs", "slowdown"}

func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return "Fault(" + strconv.Itoa(int(f)) + ")"
	}
	return faultNames[f]
}

// Class is the failure class the design assigns the fault (DESIGN.md,
// "Failures and retries"): "infra" for 5xx, 408, 429, timeouts and
// connection errors, "data" for other 4xx and broken answers, "" for None.
func (f Fault) Class() string {
	switch f {
	case None:
		return ""
	case Status500, Status503, Status429, Status408, Timeout, Reset, Truncated, SlowDown:
		// Truncated: what a server killed mid-answer leaves (failure.IsInfra).
		return failure.Infra
	}
	return failure.Data
}

// Status is the HTTP status a status fault answers with, 0 for others.
func (f Fault) Status() int {
	switch f {
	case Status500:
		return http.StatusInternalServerError
	case Status503, SlowDown:
		return http.StatusServiceUnavailable
	case Status429:
		return http.StatusTooManyRequests
	case Status408:
		return http.StatusRequestTimeout
	case Status400:
		return http.StatusBadRequest
	}
	return 0
}

// Options tune a Proxy; zero values pick the defaults shown.
type Options struct {
	// MaxHold bounds how long a Timeout fault holds a request whose
	// client has not given up (default 60s); then it is forwarded.
	MaxHold time.Duration
	// Transport carries upstream requests (default: a clone of
	// http.DefaultTransport).
	Transport http.RoundTripper
	// PreserveHost forwards the client's Host header unchanged, as a
	// transparent proxy does: a signed request (S3's SigV4 signs the
	// host) then verifies at the upstream.
	PreserveHost bool
}

// Proxy is a running fault-injecting reverse proxy on a loopback port. It
// is safe for concurrent use.
type Proxy struct {
	target string
	plan   atomic.Pointer[Plan]
	opts   Options
	ln     net.Listener
	srv    *http.Server
	up     *http.Client
	done   chan struct{}
	once   sync.Once

	seq      atomic.Int64
	injected [numFaults]atomic.Int64
	upstream atomic.Int64 // requests forwarded to the upstream
}

// New starts a proxy in front of target (a base URL such as
// "http://127.0.0.1:8000") that applies plan (nil: Never). It panics if it
// cannot listen on a loopback port, as httptest.NewServer does.
func New(target string, plan Plan) *Proxy { return NewWithOptions(target, plan, Options{}) }

// NewWithOptions is New with options.
func NewWithOptions(target string, plan Plan, opts Options) *Proxy {
	if opts.MaxHold <= 0 {
		opts.MaxHold = 60 * time.Second
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("faultproxy: listen: %v", err))
	}
	p := &Proxy{target: strings.TrimSuffix(target, "/"), opts: opts, ln: ln,
		up: &http.Client{Transport: opts.Transport}, done: make(chan struct{})}
	p.SetPlan(plan)
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p
}

// URL is the proxy's base URL, e.g. "http://127.0.0.1:41234".
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetPlan replaces the plan for requests that arrive from now on.
func (p *Proxy) SetPlan(plan Plan) {
	if plan == nil {
		plan = Never()
	}
	p.plan.Store(&plan)
}

// Close stops the proxy: held requests are let go and connections closed.
func (p *Proxy) Close() {
	p.once.Do(func() {
		close(p.done)
		p.srv.Close()
		if t, ok := p.opts.Transport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	})
}

// Injected is how many times fault f was injected.
func (p *Proxy) Injected(f Fault) int64 {
	if f < 0 || f >= numFaults {
		return 0
	}
	return p.injected[f].Load()
}

// Counts is the number of injections by fault name (faults injected at
// least once), e.g. {"503": 4, "reset": 2}.
func (p *Proxy) Counts() map[string]int64 {
	m := map[string]int64{}
	for _, f := range append(Faults, SlowDown) {
		if n := p.Injected(f); n > 0 {
			m[f.String()] = n
		}
	}
	return m
}

// Requests is the number of requests the proxy received.
func (p *Proxy) Requests() int64 { return p.seq.Load() }

// Forwarded is the number of requests sent on to the upstream.
func (p *Proxy) Forwarded() int64 { return p.upstream.Load() }

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	req := &Request{Seq: p.seq.Add(1) - 1, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body}
	f := (*p.plan.Load()).Decide(req)
	switch f {
	case Status500, Status503, Status429, Status408, Status400:
		p.injected[f].Add(1)
		if f == Status429 {
			w.Header().Set("Retry-After", "0")
		}
		writeError(w, f.Status(), "faultproxy: injected "+f.String())
		return
	case Timeout:
		p.injected[f].Add(1)
		t := time.NewTimer(p.opts.MaxHold)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-p.done:
			return
		case <-t.C:
		}
		p.forward(w, r, body, None)
		return
	case Reset:
		p.injected[f].Add(1)
		reset(w)
		return
	case SlowDown:
		p.injected[f].Add(1)
		b := []byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate. (faultproxy)</Message></Error>`)
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(b)
		return
	}
	p.forward(w, r, body, f)
}

// forward sends the request upstream and writes the answer, broken as f
// says (None, Truncated, Malformed, ShortLogprobs).
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, f Fault) {
	p.upstream.Add(1)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusBadGateway, "faultproxy: "+err.Error())
		return
	}
	for k, vs := range r.Header {
		if hopByHop(k) {
			continue
		}
		out.Header[k] = vs
	}
	if p.opts.PreserveHost {
		out.Host = r.Host
	}
	resp, err := p.up.Do(out)
	if err != nil {
		if r.Context().Err() == nil {
			writeError(w, http.StatusBadGateway, "faultproxy: upstream: "+err.Error())
		}
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		if r.Context().Err() == nil {
			writeError(w, http.StatusBadGateway, "faultproxy: upstream body: "+err.Error())
		}
		return
	}
	hdr := w.Header()
	for k, vs := range resp.Header {
		if hopByHop(k) || k == "Content-Length" {
			continue
		}
		hdr[k] = vs
	}
	status := resp.StatusCode
	switch f {
	case Truncated:
		if len(raw) >= 2 && p.truncate(w, status, hdr, raw) {
			return
		}
	case Malformed:
		if status == http.StatusOK {
			p.injected[f].Add(1)
			raw = []byte("\x00<html>not json {{{\"choices\": [")
			hdr.Set("Content-Type", "application/json")
		}
	case ShortLogprobs:
		if status == http.StatusOK {
			if b, ok := shortLogprobs(raw); ok {
				p.injected[f].Add(1)
				raw = b
			}
		}
	}
	hdr.Set("Content-Length", strconv.Itoa(len(raw)))
	w.WriteHeader(status)
	w.Write(raw)
}

// truncate writes the status, the headers with the whole body's
// Content-Length, and the first half of the body straight to the
// connection, then closes it, and counts the injection (an orderly FIN: the client reads a short
// body, not a reset).
func (p *Proxy) truncate(w http.ResponseWriter, status int, hdr http.Header, raw []byte) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return false
	}
	defer conn.Close()
	p.injected[Truncated].Add(1) // before the client can see it
	hdr.Set("Content-Length", strconv.Itoa(len(raw)))
	hdr.Set("Connection", "close")
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	hdr.Write(buf)
	buf.WriteString("\r\n")
	buf.Write(raw[:len(raw)/2])
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	return true
}

// reset closes the client's connection with SO_LINGER 0, so the peer gets
// an RST instead of a response.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// shortLogprobs removes the last entry of choices[0].logprobs.token_logprobs
// (or adds one when it is empty), so that token ids and logprobs differ in
// length. It reports false for a body that is not such a completion.
func shortLogprobs(raw []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var body map[string]any
	if dec.Decode(&body) != nil {
		return nil, false
	}
	choices, _ := body["choices"].([]any)
	if len(choices) == 0 {
		return nil, false
	}
	ch, _ := choices[0].(map[string]any)
	lp, _ := ch["logprobs"].(map[string]any)
	tl, ok := lp["token_logprobs"].([]any)
	if !ok {
		return nil, false
	}
	if len(tl) > 0 {
		lp["token_logprobs"] = tl[:len(tl)-1]
	} else {
		lp["token_logprobs"] = []any{json.Number("-1")}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, false
	}
	return b, true
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "faultproxy", "code": status}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

func hopByHop(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}
