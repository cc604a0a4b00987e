package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/allowpath"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/train"
	"github.com/longhaul-rl/longhaul/train/embedded"
)

// realTrainer is the embedded trainer over a tiny byte model: the trainer
// `longhaul serve-trainer` serves, not a fake.
func realTrainer(t testing.TB) *embedded.Trainer {
	t.Helper()
	m, err := model.NewBuiltin(model.Config{Family: model.FamilyLlama, Vocab: 264, Dim: 16, Heads: 2, KVHeads: 2,
		Layers: 1, Hidden: 32, MaxPos: 32, RopeTheta: 10000, NormEps: 1e-5, Tied: true, InitStd: 0.02}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := embedded.New(m, model.OptimConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Schedule: "constant"}, model.LossConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// goodRows are two trainable rows the tiny model accepts.
func goodRows() []train.Row {
	return []train.Row{
		{Tokens: []int32{1, 2, 3}, Mask: []uint8{0, 1, 1}, Advantages: []float32{0, 1, 1}, OldLogprobs: []float32{0, -5, -5}},
		{Tokens: []int32{4, 5}, Mask: []uint8{0, 1}, Advantages: []float32{0, -1}, OldLogprobs: []float32{0, -5}},
	}
}

// post sends body to path and returns the status and the answer.
func post(t testing.TB, url, path, ctype string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(url+path, ctype, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rawTensors encodes a train_step payload by hand: header entries as
// given (shapes a client would never send), no data.
func rawTensors(shape string) []byte {
	hdr := fmt.Sprintf(`{"__metadata__":{"loss":"pg"},"tokens":{"dtype":"I32","shape":%s,"data_offsets":[0,0]},"mask":{"dtype":"U8","shape":%s,"data_offsets":[0,0]},"advantages":{"dtype":"F32","shape":%s,"data_offsets":[0,0]},"old_logprobs":{"dtype":"F32","shape":%s,"data_offsets":[0,0]},"lengths":{"dtype":"I32","shape":[0],"data_offsets":[0,0]}}`,
		shape, shape, shape, shape)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr...)
}

// TestBadInputIsNotAFault: the handler over the real embedded trainer
// answers every bad input with 400 or 422 naming the field, trains
// nothing on it, and still trains a good batch afterwards. On main each
// of these was a 500 (the trainer's own error) or was trained.
func TestBadInputIsNotAFault(t *testing.T) {
	tr := realTrainer(t)
	allowed := t.TempDir()
	set, err := allowpath.New([]string{allowed})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(NewHandler(tr, HandlerOptions{AllowPaths: &set}))
	defer ts.Close()
	batch := func(edit func(*train.Batch)) []byte {
		b := train.Batch{Loss: train.LossPG, Rows: goodRows()}
		edit(&b)
		p, err := encodeBatch(b, -1)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	os.Mkdir(filepath.Join(allowed, "empty"), 0o755)
	for _, c := range []struct {
		name, path string
		body       []byte
		field      string
	}{
		{"zero rows", "/v1/train_step", batch(func(b *train.Batch) { b.Rows = nil }), "rows"},
		{"shape [0, 2^60]", "/v1/train_step", rawTensors("[0,1152921504606846976]"), "shape"},
		{"shape [2^40, 2^40]", "/v1/train_step", rawTensors("[1099511627776,1099511627776]"), "shape"},
		{"no trainable tokens", "/v1/train_step", batch(func(b *train.Batch) {
			for _, r := range b.Rows {
				clear(r.Mask)
			}
		}), "no trainable tokens"},
		{"a row in two microbatches", "/v1/train_step", batch(func(b *train.Batch) { b.Microbatches = [][]int{{0}, {0}} }), "microbatches[1]: row 0"},
		{"an empty microbatch", "/v1/train_step", batch(func(b *train.Batch) { b.Microbatches = [][]int{{}} }), "microbatches[0] is empty"},
		{"a row in no microbatch", "/v1/train_step", batch(func(b *train.Batch) { b.Microbatches = [][]int{{1}} }), "row 0 is in no microbatch"},
		{"an empty plan", "/v1/train_step", batch(func(b *train.Batch) { b.Microbatches = [][]int{} }), "row 0 is in no microbatch"},
		{"export into a missing directory", "/v1/export_weights", fmt.Appendf(nil, `{"path":%q}`, filepath.Join(allowed, "no", "w.safetensors")), "path"},
		{"checkpoint into a missing directory", "/v1/save_checkpoint", fmt.Appendf(nil, `{"dir":%q}`, filepath.Join(allowed, "no", "ck")), "dir"},
		{"load a missing checkpoint", "/v1/load_checkpoint", fmt.Appendf(nil, `{"dir":%q}`, filepath.Join(allowed, "no")), "dir"},
		{"load a directory that is no checkpoint", "/v1/load_checkpoint", fmt.Appendf(nil, `{"dir":%q}`, filepath.Join(allowed, "empty")), "does not hold a checkpoint"},
	} {
		ctype := "application/json"
		if c.path == "/v1/train_step" {
			ctype = "application/octet-stream"
		}
		status, msg := post(t, ts.URL, c.path, ctype, c.body)
		if (status != 400 && status != 422) || !strings.Contains(msg, c.field) {
			t.Errorf("%s: HTTP %d %s; want 400 or 422 naming %q", c.name, status, strings.TrimSpace(msg), c.field)
			continue
		}
		t.Logf("%s: %d %s", c.name, status, strings.TrimSpace(msg))
	}
	if st, _ := tr.State(t.Context()); st.Step != 0 {
		t.Fatalf("the trainer took %d steps on bad input", st.Step)
	}
	status, msg := post(t, ts.URL, "/v1/train_step", "application/octet-stream", batch(func(b *train.Batch) { b.Microbatches = [][]int{{1}, {0}} }))
	if status != 200 {
		t.Fatalf("a good batch after the bad ones: %d %s", status, msg)
	}
	ck := filepath.Join(allowed, "ck")
	for _, c := range []struct{ path, body string }{
		{"/v1/save_checkpoint", fmt.Sprintf(`{"dir":%q}`, ck)}, // absent, in a directory that exists
		{"/v1/load_checkpoint", fmt.Sprintf(`{"dir":%q}`, ck)},
		{"/v1/export_weights", fmt.Sprintf(`{"path":%q}`, filepath.Join(allowed, "w.safetensors"))},
	} {
		if status, msg := post(t, ts.URL, c.path, "application/json", []byte(c.body)); status != 200 {
			t.Fatalf("%s %s: %d %s", c.path, c.body, status, msg)
		}
	}
}

// TestValidatePlan: a microbatch plan holds every row exactly once.
func TestValidatePlan(t *testing.T) {
	b := train.Batch{Loss: train.LossPG, Rows: append(goodRows(), goodRows()[0])}
	for _, c := range []struct {
		plan [][]int
		want string
	}{
		{nil, ""},
		{[][]int{{2, 0}, {1}}, ""},
		{[][]int{{0, 1, 2}}, ""},
		{[][]int{{0}, {0}, {1, 2}}, "row 0 is already in microbatches[0]"},
		{[][]int{{0, 1, 1}, {2}}, "row 1 is already in microbatches[0]"},
		{[][]int{{0, 1}}, "row 2 is in no microbatch"},
		{[][]int{{0, 1, 2}, {}}, "microbatches[1] is empty"},
		{[][]int{{0, 1, 2, 3}}, "row 3 outside [0, 3)"},
		{[][]int{{-1, 0, 1, 2}}, "row -1 outside"},
	} {
		b.Microbatches = c.plan
		err := train.ValidateBatch(b)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("plan %v: %v, want %q", c.plan, err, c.want)
		}
	}
}

// FuzzTrainStepPayload: whatever bytes a client sends to train_step, the
// handler over the real embedded trainer answers without a 500 or a
// panic, and the trainer steps only when it answers 200. The seeds run in
// every `go test`; `go test -fuzz FuzzTrainStepPayload ./train/remote`
// explores (.ci/steps/19-fuzz.sh runs it briefly).
func FuzzTrainStepPayload(f *testing.F) {
	good, err := encodeBatch(train.Batch{Loss: train.LossPG, Rows: goodRows(), Microbatches: [][]int{{0}, {1}}}, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	// A batch for a step the trainer is not at: 409 step_conflict.
	ahead, err := encodeBatch(train.Batch{Loss: train.LossPG, Rows: goodRows(), Microbatches: [][]int{{0}, {1}}}, 5)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ahead)
	for _, edit := range []func(*train.Batch){
		func(b *train.Batch) { b.Rows = nil },
		func(b *train.Batch) { clear(b.Rows[0].Mask); clear(b.Rows[1].Mask) },
		func(b *train.Batch) { b.Microbatches = [][]int{{0}, {0}} },
		func(b *train.Batch) { b.Rows[0].Tokens[1] = 9999 },
		func(b *train.Batch) { b.Loss = train.LossSFT },
	} {
		b := train.Batch{Loss: train.LossPG, Rows: goodRows()}
		edit(&b)
		if p, err := encodeBatch(b, -1); err == nil {
			f.Add(p)
		}
	}
	f.Add(rawTensors("[0,1152921504606846976]"))
	f.Add([]byte{})
	f.Add([]byte("{}"))
	tr := realTrainer(f)
	h := NewHandler(tr, HandlerOptions{MaxBodyBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, body []byte) {
		before, _ := tr.State(context.Background())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/train_step", bytes.NewReader(body)))
		after, _ := tr.State(context.Background())
		if w.Code == http.StatusInternalServerError || w.Code == 0 {
			t.Fatalf("HTTP %d for a client's payload: %s", w.Code, w.Body.String())
		}
		if stepped := after.Step != before.Step; stepped != (w.Code == http.StatusOK) {
			t.Fatalf("HTTP %d, trainer step %d -> %d", w.Code, before.Step, after.Step)
		}
		if w.Code != http.StatusOK {
			// A 409 carries the trainer's step and version beside the error.
			var e struct {
				Error errBody `json:"error"`
			}
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error.Message == "" {
				t.Fatalf("HTTP %d without an error message: %s", w.Code, w.Body.String())
			}
		}
	})
}
