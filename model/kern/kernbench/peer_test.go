package kernbench

import "testing"

// TestPeerCore: the peer runs OpenBLAS kernels of the ISA our path runs,
// and leaves OpenBLAS's own choice when it already is one.
func TestPeerCore(t *testing.T) {
	for _, c := range []struct{ path, detected, want string }{
		{"avx512", "Prescott", "SkylakeX"}, // an OpenBLAS older than the CPU
		{"avx512", "", "SkylakeX"},
		{"avx512", "SapphireRapids", ""},
		{"avx512", "Haswell", "SkylakeX"},
		{"avx2", "Prescott", "Haswell"},
		{"avx2", "SkylakeX", "Haswell"}, // AVX2 forced on an AVX-512 CPU
		{"avx2", "Zen", ""},
		{"portable", "Prescott", ""},
	} {
		if got := peerCore(c.path, c.detected); got != c.want {
			t.Errorf("peerCore(%q, %q) = %q, want %q", c.path, c.detected, got, c.want)
		}
	}
}

func TestParseCore(t *testing.T) {
	for out, want := range map[string]string{
		"Core: Prescott\n":                      "Prescott",
		"Core not found: \nCore: Cooperlake\n":  "Cooperlake",
		"some warning\n  Core: SkylakeX  \n":    "SkylakeX",
		"":                                      "",
		"Unknown CPU model - please report it.": "",
	} {
		if got := parseCore(out); got != want {
			t.Errorf("parseCore(%q) = %q, want %q", out, got, want)
		}
	}
}
