package hf

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Unicode normalization as Hugging Face tokenizers (Rust's
// unicode-normalization), transformers.js (String.prototype.normalize)
// and Python's unicodedata do it. golang.org/x/text/unicode/norm writes
// the Stream-Safe Text Format (UAX #15): after 30 combining marks in a row
// it inserts U+034F COMBINING GRAPHEME JOINER and orders and composes the
// marks on each side of it separately. The others order a run of any
// length as one, and insert nothing: "x" and 31 acute accents is 32
// tokens to them, 34 after norm.NFC.
//
// norm's result is kept unless it holds more U+034F than the input (the
// joiner has no decomposition and composes with nothing, so norm adds
// one only there); then each segment where it did is normalized here:
// decomposed rune by rune, its marks stably sorted by combining class,
// and, for the composing forms, composed by the canonical composition
// algorithm, norm deciding each pair.

// unicodeNormalizer returns form's normalization function.
func unicodeNormalizer(form norm.Form) normalizer {
	return func(s string) string {
		out := form.String(s)
		if !strings.Contains(out, cgj) || strings.Count(out, cgj) == strings.Count(s, cgj) {
			return out
		}
		return normalizeLong(form, s)
	}
}

const cgj = "\u034f"

// normalizeLong normalizes s segment by segment (a segment starts at a
// rune with a normalization boundary before it), by hand where norm would
// insert a joiner.
func normalizeLong(form norm.Form, s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	start := 0
	flush := func(end int) {
		seg := s[start:end]
		if out := form.String(seg); strings.Count(out, cgj) == strings.Count(seg, cgj) {
			b.WriteString(out)
		} else {
			b.WriteString(normalizeSegment(form, seg))
		}
		start = end
	}
	for i := 0; i < len(s); {
		p := form.PropertiesString(s[i:])
		n := max(p.Size(), 1)
		if i > start && p.BoundaryBefore() {
			flush(i)
		}
		i += n
	}
	flush(len(s))
	return b.String()
}

// normalizeSegment decomposes, orders and (for NFC and NFKC) composes one
// segment without a length limit.
func normalizeSegment(form norm.Form, seg string) string {
	decomp, composing := norm.NFD, false
	switch form {
	case norm.NFC:
		composing = true
	case norm.NFKC:
		decomp, composing = norm.NFKD, true
	case norm.NFKD:
		decomp = norm.NFKD
	}
	var rs []rune
	for _, r := range seg {
		// one rune's decomposition never reaches the stream-safe limit
		rs = append(rs, []rune(decomp.String(string(r)))...)
	}
	// canonical ordering: each run of non-starters stably by class
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
		i = j
	}
	if composing {
		rs = compose(rs)
	}
	return string(rs)
}

func ccc(r rune) uint8 {
	var buf [utf8.UTFMax]byte
	return norm.NFD.Properties(buf[:utf8.EncodeRune(buf[:], r)]).CCC()
}

// compose is the canonical composition algorithm (UAX #15, section 3.3)
// over a decomposed, ordered sequence.
func compose(rs []rune) []rune {
	if len(rs) == 0 {
		return rs
	}
	starter, last := 0, 256 // a leading non-starter composes with nothing
	if ccc(rs[0]) == 0 {
		last = 0
	}
	out := rs[:1]
	for _, r := range rs[1:] {
		c := int(ccc(r))
		if p, ok := primaryComposite(out[starter], r); ok && (last < c || last == 0) {
			out[starter] = p
			continue
		}
		if c == 0 {
			starter = len(out)
		}
		last = c
		out = append(out, r)
	}
	return out
}

// primaryComposite is the composition of starter a with r, if any: the
// single rune NFC makes of the pair, when its full decomposition is a's
// followed by r (not a rune NFC reached by reordering the two).
func primaryComposite(a, r rune) (rune, bool) {
	pair := string(a) + string(r)
	out := norm.NFC.String(pair)
	p, n := utf8.DecodeRuneInString(out)
	if n != len(out) || p == a {
		return 0, false
	}
	return p, norm.NFD.String(out) == norm.NFD.String(string(a))+string(r)
}
