package hf

import (
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

// BenchmarkEncodeVsReference encodes the same ~1 MB corpus (generated
// multilingual text, code, numbers, special tokens) with this package and
// with @huggingface/transformers in the same run, and reports both
// throughputs and their ratio (ref_x = Go MB/s / JS MB/s).
func BenchmarkEncodeVsReference(b *testing.B) {
	for _, model := range tokref.Models {
		b.Run(model, func(b *testing.B) {
			tok, err := Load(tokref.ModelDir(b, model))
			if err != nil {
				b.Fatal(err)
			}
			var specials []string
			for _, a := range tok.Special()[:4] {
				specials = append(specials, a.Content)
			}
			corpus := strings.Join(tokref.Strings(99, 12000, specials), "\n")
			var js struct {
				Bytes   float64 `json:"bytes"`
				Seconds float64 `json:"seconds"`
			}
			tokref.Run(b, map[string]any{"text": corpus, "reps": 3}, &js, "bench", model)
			b.SetBytes(int64(len(corpus)))
			b.ResetTimer()
			for b.Loop() {
				tok.Encode(corpus)
			}
			goMBs := float64(len(corpus)) * float64(b.N) / b.Elapsed().Seconds() / 1e6
			jsMBs := js.Bytes / js.Seconds / 1e6
			b.ReportMetric(jsMBs, "js_MB/s")
			b.ReportMetric(goMBs/jsMBs, "ref_x")
		})
	}
}
