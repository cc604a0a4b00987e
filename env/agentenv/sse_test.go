package agentenv

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// pieces never cuts a UTF-8 sequence and loses nothing.
func TestPieces(t *testing.T) {
	for _, s := range []string{"", "abc", strings.Repeat("é", 20), "日本語のテキストを分割する", "a\xffb" + strings.Repeat("€", 9)} {
		ps := pieces(s, 5)
		if strings.Join(ps, "") != s {
			t.Fatalf("%q: pieces %q do not join to it", s, ps)
		}
		for _, p := range ps {
			if p == "" || (utf8.ValidString(s) && !utf8.ValidString(p)) {
				t.Fatalf("%q: bad piece %q", s, p)
			}
		}
	}
}
