package hf

import (
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/internal/tokref"
)

func BenchmarkLoadQwen3(b *testing.B) {
	dir := tokref.ModelDir(b, "qwen3")
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}
