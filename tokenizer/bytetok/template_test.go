package bytetok

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
	// A reply past the 32 bytes Go keeps a small buffer on the stack
	// for: a []byte and string(b) would be two allocations.
	long := Encode("12+34=46, carried over from the previous balance of the ledger")
	for _, tt := range [][]int32{toks, long} {
		if n := testing.AllocsPerRun(100, func() { _ = DecodeText(tt) }); n > 1 {
			t.Fatalf("DecodeText of %d tokens allocates %v times, want 1", len(tt), n)
		}
	}
}
