package tokenizer

import "testing"

// TestDecodeText checks the text of a reply: byte tokens kept in order,
// special tokens dropped, and one allocation (the string) per reply.
func TestDecodeText(t *testing.T) {
	toks := append([]int32{BOS}, append(Encode("1+2=3"), End)...)
	if got := DecodeText(toks); got != "1+2=3" {
		t.Fatalf("DecodeText = %q, want %q", got, "1+2=3")
	}
	if got := DecodeText([]int32{End}); got != "" {
		t.Fatalf("DecodeText of a special token = %q, want empty", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = DecodeText(toks) }); n > 1 {
		t.Fatalf("DecodeText allocates %v times, want 1", n)
	}
}
