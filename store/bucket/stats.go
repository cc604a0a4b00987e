package bucket

import (
	"io"
	"net/http"
	"sync/atomic"
)

// Stats counts the HTTP requests a client sent (every attempt, retries
// included) by the class S3 bills them in, and the bytes each way.
type Stats struct {
	// Puts: PUT, POST and LIST requests (S3's "PUT, COPY, POST, LIST"
	// class); Lists are counted in Puts too, and apart.
	Puts, Lists atomic.Int64
	// Gets: GET and HEAD requests other than lists.
	Gets atomic.Int64
	// Deletes are free on S3.
	Deletes   atomic.Int64
	BytesUp   atomic.Int64
	BytesDown atomic.Int64
	// Failed: attempts that got no answer or a 5xx/429 (retried or not).
	Failed atomic.Int64
}

// Snapshot is a copy of Stats' counters.
type Snapshot struct {
	Puts, Lists, Gets, Deletes, BytesUp, BytesDown, Failed int64
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	return Snapshot{Puts: s.Puts.Load(), Lists: s.Lists.Load(), Gets: s.Gets.Load(), Deletes: s.Deletes.Load(),
		BytesUp: s.BytesUp.Load(), BytesDown: s.BytesDown.Load(), Failed: s.Failed.Load()}
}

// Sub is the difference a - b.
func (a Snapshot) Sub(b Snapshot) Snapshot {
	return Snapshot{a.Puts - b.Puts, a.Lists - b.Lists, a.Gets - b.Gets, a.Deletes - b.Deletes,
		a.BytesUp - b.BytesUp, a.BytesDown - b.BytesDown, a.Failed - b.Failed}
}

// countingClient counts the requests of the SDK's HTTP client.
type countingClient struct {
	c interface {
		Do(*http.Request) (*http.Response, error)
	}
	s *Stats
}

func (t countingClient) Do(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodDelete:
		t.s.Deletes.Add(1)
	case r.Method == http.MethodGet && (q.Has("list-type") || q.Has("uploads") || q.Has("uploadId")):
		t.s.Lists.Add(1)
		t.s.Puts.Add(1)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		t.s.Gets.Add(1)
	default:
		t.s.Puts.Add(1)
	}
	if r.ContentLength > 0 {
		t.s.BytesUp.Add(r.ContentLength)
	}
	resp, err := t.c.Do(r)
	if err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		t.s.Failed.Add(1)
	}
	if err == nil && resp.Body != nil {
		resp.Body = &countingBody{resp.Body, t.s}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	s *Stats
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.s.BytesDown.Add(int64(n))
	return n, err
}
