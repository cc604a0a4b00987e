package kern

import (
	"strings"
	"testing"
)

// TestParsePath: PathEnv selects a path at or below what the CPU has, and
// anything else is an error naming the variable and the value.
func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		have int
		v    string
		want int
		err  string
	}{
		{isaAVX512, "", isaAVX512, ""},
		{isaAVX512, "avx2", isaAVX2, ""},
		{isaAVX512, "portable", isaRef, ""},
		{isaAVX512, "avx512", isaAVX512, ""},
		{isaAVX2, "avx512", 0, `"avx512": this CPU/build only runs up to "avx2"`},
		{isaRef, "avx2", 0, `only runs up to "portable"`},
		{isaAVX512, "AVX2", 0, `LONGHAUL_KERN_PATH="AVX2": want one of`},
	} {
		got, err := parsePath(c.have, c.v)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parsePath(%s, %q) error %v, want one containing %q", isaName(c.have), c.v, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parsePath(%s, %q) = %s, %v; want %s", isaName(c.have), c.v, isaName(got), err, isaName(c.want))
		}
	}
}
