package remote

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/train"
)

// fakeTrainer records what it is given and steps a counter.
type fakeTrainer struct {
	mu      sync.Mutex
	batches []train.Batch
	st      train.State
	calls   []string
	err     error // returned by every call when set
	block   chan struct{}
}

func (f *fakeTrainer) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return train.StepStats{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return train.StepStats{}, f.err
	}
	f.batches = append(f.batches, b)
	f.st.Step++
	f.st.Version = f.st.Step
	return train.StepStats{Step: f.st.Step, Version: f.st.Version, Loss: math.NaN(), GradNorm: math.Inf(1), LR: 3e-4, ClipFrac: 0.125, Tokens: 7,
		Diag: fakeDiag}, nil
}

// fakeDiag has a distinct value in every field, so a field the wire drops
// or swaps shows.
var fakeDiag = train.Diagnostics{Entropy: 1.5, KLRef: 0.01, KLSampler: 0.02, ClipLowFrac: 0.03, ClipHighFrac: 0.04,
	LogprobAbsDiff: 0.05, RatioP05: 0.9, RatioP50: 1.01, RatioP95: 1.2, RatioMax: math.Inf(1)}

func (f *fakeTrainer) State(context.Context) (train.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, f.err
}

func (f *fakeTrainer) record(op, arg string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op+" "+arg)
	return f.err
}

func (f *fakeTrainer) SaveCheckpoint(_ context.Context, d string) error { return f.record("save", d) }
func (f *fakeTrainer) LoadCheckpoint(_ context.Context, d string) error { return f.record("load", d) }
func (f *fakeTrainer) ExportWeights(_ context.Context, p string) error  { return f.record("export", p) }

func testBatch() train.Batch {
	nan := math.Float32frombits(0x7fc00abc) // a NaN with a payload: bits must survive
	return train.Batch{
		Loss: train.LossPG,
		Rows: []train.Row{
			{Tokens: []int32{256, 1, 2, 263}, Mask: []uint8{0, 1, 1, 1}, Advantages: []float32{0, 0.5, -1.25, float32(math.Copysign(0, -1))}, OldLogprobs: []float32{0, -0.1, nan, -3e-38}},
			{Tokens: []int32{7}, Mask: []uint8{1}, Advantages: []float32{math.MaxFloat32}, OldLogprobs: []float32{-math.SmallestNonzeroFloat32}},
			{Tokens: []int32{}, Mask: []uint8{}, Advantages: []float32{}, OldLogprobs: []float32{}},
		},
		Microbatches: [][]int{{0, 2}, {1}},
	}
}

func bitsEqual(a, b train.Batch) error {
	if a.Loss != b.Loss || !reflect.DeepEqual(a.Microbatches, b.Microbatches) || len(a.Rows) != len(b.Rows) {
		return fmt.Errorf("header: %q %v %d vs %q %v %d", a.Loss, a.Microbatches, len(a.Rows), b.Loss, b.Microbatches, len(b.Rows))
	}
	for i := range a.Rows {
		x, y := a.Rows[i], b.Rows[i]
		if !reflect.DeepEqual(x.Tokens, y.Tokens) || !reflect.DeepEqual(x.Mask, y.Mask) || len(x.Advantages) != len(y.Advantages) || len(x.OldLogprobs) != len(y.OldLogprobs) {
			return fmt.Errorf("row %d: %+v vs %+v", i, x, y)
		}
		for j := range x.Advantages {
			if math.Float32bits(x.Advantages[j]) != math.Float32bits(y.Advantages[j]) || math.Float32bits(x.OldLogprobs[j]) != math.Float32bits(y.OldLogprobs[j]) {
				return fmt.Errorf("row %d token %d: floats differ in bits", i, j)
			}
		}
	}
	return nil
}

func TestRoundTrip(t *testing.T) {
	f := &fakeTrainer{}
	ts := httptest.NewServer(Handler(f))
	defer ts.Close()
	c := New(ts.URL+"/", Options{})
	ctx := t.Context()
	b := testBatch()
	st, err := c.TrainStep(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 1 || st.Version != 1 || !math.IsNaN(st.Loss) || !math.IsInf(st.GradNorm, 1) || st.LR != 3e-4 || st.ClipFrac != 0.125 || st.Tokens != 7 || st.Diag != fakeDiag {
		t.Fatalf("stats %+v", st)
	}
	if err := bitsEqual(b, f.batches[0]); err != nil {
		t.Fatal(err)
	}
	b2 := train.Batch{Loss: train.LossSFT, Rows: b.Rows[:1]}
	if _, err := c.TrainStep(ctx, b2); err != nil {
		t.Fatal(err)
	}
	if err := bitsEqual(b2, f.batches[1]); err != nil || f.batches[1].Microbatches != nil {
		t.Fatalf("%v, microbatches %v", err, f.batches[1].Microbatches)
	}
	s, err := c.State(ctx)
	if err != nil || s != (train.State{Step: 2, Version: 2}) {
		t.Fatalf("state %+v %v", s, err)
	}
	// The handler checks the paths on disk: a checkpoint is written into a
	// directory that exists, loaded from one that exists, and an export
	// goes into a directory that exists.
	tmp := t.TempDir()
	ck, w := filepath.Join(tmp, "1"), filepath.Join(tmp, "model.safetensors")
	if err := c.SaveCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(ck, 0o755) // the fake trainer writes nothing
	if err := c.LoadCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if err := c.ExportWeights(ctx, w); err != nil {
		t.Fatal(err)
	}
	if want := []string{"save " + ck, "load " + ck, "export " + w}; !reflect.DeepEqual(f.calls, want) {
		t.Fatalf("calls %v", f.calls)
	}
	resp, err := http.Get(ts.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestStepFence(t *testing.T) {
	f := &fakeTrainer{}
	ts := httptest.NewServer(Handler(f))
	defer ts.Close()
	c := New(ts.URL, Options{})
	if _, err := c.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TrainStep(t.Context(), testBatch()); err != nil {
		t.Fatal(err)
	}
	// Another client moves the trainer on; this client's next step is
	// refused rather than applied on a state it did not expect.
	if _, err := New(ts.URL, Options{}).TrainStep(t.Context(), testBatch()); err != nil {
		t.Fatal(err)
	}
	_, err := c.TrainStep(t.Context(), testBatch())
	if !errors.Is(err, ErrStepConflict) || failure.ClassOf(err) != failure.Data || len(f.batches) != 2 {
		t.Fatalf("got %v, %d batches", err, len(f.batches))
	}
	if _, err := c.State(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TrainStep(t.Context(), testBatch()); err != nil {
		t.Fatalf("after resync: %v", err)
	}
}

func TestErrorMapping(t *testing.T) {
	f := &fakeTrainer{}
	ts := httptest.NewServer(NewHandler(f, HandlerOptions{APIKey: "k", MaxBodyBytes: 4096}))
	defer ts.Close()
	ctx := t.Context()
	check := func(name string, err error, class string, status int) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.Class != class || e.Status != status || failure.ClassOf(err) != class {
			t.Errorf("%s: got %v, want %s %d", name, err, class, status)
		}
	}
	_, err := New(ts.URL, Options{}).State(ctx)
	check("no key", err, failure.Data, 401)
	c := New(ts.URL, Options{APIKey: "k"})
	f.err = fmt.Errorf("bad dir: %w", ErrInvalid)
	check("invalid", c.SaveCheckpoint(ctx, filepath.Join(t.TempDir(), "x")), failure.Data, 422)
	f.err = errors.New("CUDA out of memory")
	_, err = c.TrainStep(ctx, testBatch())
	check("trainer failure", err, failure.Infra, 500)
	if !strings.Contains(err.Error(), "CUDA out of memory") {
		t.Errorf("message lost: %v", err)
	}
	f.err = nil
	big := testBatch()
	big.Rows[0].Tokens = make([]int32, 2000)
	big.Rows[0].Mask, big.Rows[0].Advantages, big.Rows[0].OldLogprobs = make([]uint8, 2000), make([]float32, 2000), make([]float32, 2000)
	_, err = c.TrainStep(ctx, big)
	check("too large", err, failure.Data, 413)
	bad := testBatch()
	bad.Rows[0].Mask = bad.Rows[0].Mask[:1]
	_, err = c.TrainStep(ctx, bad)
	check("ragged row", err, failure.Data, 0)
	bad = testBatch()
	bad.Loss = "dpo"
	_, err = c.TrainStep(ctx, bad)
	check("bad loss", err, failure.Data, 400)
	check("missing dir", c.SaveCheckpoint(ctx, ""), failure.Data, 400)

	// Deadline and dead server are infra.
	f.block = make(chan struct{})
	_, err = New(ts.URL, Options{APIKey: "k", StepTimeout: 30 * time.Millisecond}).TrainStep(ctx, testBatch())
	check("deadline", err, failure.Infra, 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline not in chain: %v", err)
	}
	close(f.block)
	dead := httptest.NewServer(Handler(f))
	dead.Close()
	_, err = New(dead.URL, Options{MaxOutage: 100 * time.Millisecond, MinBackoff: 10 * time.Millisecond}).State(ctx)
	check("dead", err, failure.Infra, 0)

	// Answers that break the contract are data; 429/503 are infra.
	for _, tc := range []struct {
		status int
		body   string
		class  string
	}{{200, `{"step": "x"}`, failure.Data}, {200, `{"step":`, failure.Data}, {429, `{}`, failure.Infra}, {503, `busy`, failure.Infra}, {404, ``, failure.Data}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		_, err := New(srv.URL, Options{MaxOutage: 100 * time.Millisecond, MinBackoff: 10 * time.Millisecond}).State(ctx)
		check(fmt.Sprintf("%d %s", tc.status, tc.body), err, tc.class, tc.status)
		srv.Close()
	}

	// An answer cut short of its length is what a trainer killed
	// mid-answer leaves: infra, not a broken answer.
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "500")
		_, _ = w.Write([]byte(`{"step": 1, "ver`))
	}))
	defer cut.Close()
	_, err = New(cut.URL, Options{MaxOutage: 100 * time.Millisecond, MinBackoff: 10 * time.Millisecond}).State(ctx)
	check("cut short", err, failure.Infra, 200)
}

func TestSafetensorsLayout(t *testing.T) {
	p, err := encodeBatch(testBatch(), 5)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(p)
	if n%8 != 0 {
		t.Fatalf("header length %d not a multiple of 8", n)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(p[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	var tok headerEntry
	_ = json.Unmarshal(hdr["tokens"], &tok)
	if tok.Dtype != "I32" || !reflect.DeepEqual(tok.Shape, []int{3, 4}) || tok.DataOffsets != [2]int{0, 48} {
		t.Fatalf("tokens entry %+v", tok)
	}
	var meta map[string]string
	_ = json.Unmarshal(hdr["__metadata__"], &meta)
	if meta["loss"] != "pg" || meta["microbatches"] != "[[0,2],[1]]" || meta["expect_step"] != "5" {
		t.Fatalf("metadata %v", meta)
	}
	b, expect, err := decodeBatch(p)
	if err != nil || expect != 5 {
		t.Fatal(err, expect)
	}
	if err := bitsEqual(testBatch(), b); err != nil {
		t.Fatal(err)
	}
	empty, err := encodeBatch(train.Batch{Loss: train.LossSFT}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if eb, expect, err := decodeBatch(empty); err != nil || len(eb.Rows) != 0 || expect != -1 || eb.Microbatches != nil {
		t.Fatalf("empty batch: %+v %d %v", eb, expect, err)
	}
	// Every truncation and a few corruptions are rejected, never panic.
	for cut := range len(p) {
		if _, _, err := decodeBatch(p[:cut]); err == nil {
			t.Fatalf("cut at %d accepted", cut)
		}
	}
	corrupt := func(f func([]byte)) []byte { q := append([]byte(nil), p...); f(q); return q }
	for name, q := range map[string][]byte{
		"huge header": corrupt(func(q []byte) { binary.LittleEndian.PutUint64(q, 1<<40) }),
		"bad dtype":   []byte(strings.Replace(string(p), `"F32"`, `"F64"`, 1)),
		"bad shape":   []byte(strings.Replace(string(p), `[3,4]`, `[4,3]`, 1)),
		"trailing":    append(append([]byte(nil), p...), 0),
	} {
		if _, _, err := decodeBatch(q); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}
