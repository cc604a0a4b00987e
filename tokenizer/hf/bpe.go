package hf

import (
	"strings"
	"unicode/utf8"
)

// Byte-level BPE on token ids: every byte starts as the id of its byte-level
// character, then the lowest-ranked adjacent pair is merged until no pair in
// the merge table remains (Hugging Face's BPE::merge_word semantics: lowest
// rank first, leftmost first among equal ranks).

// merge is one entry of the merge table.
type merge struct {
	rank int32
	id   int32 // the merged token
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe holds the model part of a tokenizer.json.
type bpe struct {
	vocab        map[string]int32 // raw bytes -> id (byte-level characters decoded); chars: as written
	merges       map[uint64]merge
	byteID       [256]int32 // id of each single byte (byte-level)
	ignoreMerges bool       // Llama 3: a piece that is a whole vocab entry is one token

	// charLevel: no ByteLevel pre-tokenizer, so the symbols BPE starts
	// from are characters (SentencePiece-converted models: Llama 2,
	// Mistral, Gemma). A character not in the vocab becomes the
	// <0xXX> tokens of its UTF-8 bytes when byteFallback is set and all
	// of them exist, else unk (when the model names one; else nothing),
	// consecutive unks fused into one when fuseUnk is set.
	charLevel    bool
	byteFallback bool
	fallbackID   [256]int32 // id of "<0xXX>", -1 when absent
	unk          int32      // -1: none
	fuseUnk      bool
}

// symbols appends the ids BPE starts from for piece.
func (m *bpe) symbols(sym []int32, piece string) []int32 {
	if !m.charLevel {
		for i := 0; i < len(piece); i++ {
			sym = append(sym, m.byteID[piece[i]])
		}
		return sym
	}
	for i, r := range piece {
		c := piece[i : i+utf8.RuneLen(r)]
		if r == utf8.RuneError && !strings.HasPrefix(piece[i:], "\uFFFD") {
			c = piece[i : i+1]
		}
		if id, ok := m.vocab[c]; ok {
			sym = append(sym, id)
			continue
		}
		if m.byteFallback && m.hasFallback(c) {
			for k := 0; k < len(c); k++ {
				sym = append(sym, m.fallbackID[c[k]])
			}
			continue
		}
		if m.unk >= 0 && !(m.fuseUnk && len(sym) > 0 && sym[len(sym)-1] == m.unk) {
			sym = append(sym, m.unk)
		}
	}
	return sym
}

func (m *bpe) hasFallback(c string) bool {
	for k := 0; k < len(c); k++ {
		if m.fallbackID[c[k]] < 0 {
			return false
		}
	}
	return true
}

// heapThreshold is the piece length above which the linked-list/heap merge
// is used; below it the quadratic scan is faster.
const heapThreshold = 48

// appendPiece appends the ids of one pre-tokenized piece (raw bytes).
func (m *bpe) appendPiece(dst []int32, piece string, scratch []int32) ([]int32, []int32) {
	if len(piece) == 0 {
		return dst, scratch
	}
	if m.ignoreMerges || len(piece) == 1 {
		if id, ok := m.vocab[piece]; ok {
			return append(dst, id), scratch
		}
	}
	sym := m.symbols(scratch[:0], piece)
	if len(sym) > heapThreshold {
		return m.mergeLong(dst, sym), sym
	}
	return m.mergeShort(dst, sym)
}

// mergeShort is the quadratic merge for short pieces, in place in sym.
func (m *bpe) mergeShort(dst []int32, sym []int32) ([]int32, []int32) {
	for len(sym) > 1 {
		best, bestRank := -1, int32(1<<31-1)
		var bestID int32
		for i := 0; i+1 < len(sym); i++ {
			if mg, ok := m.merges[pairKey(sym[i], sym[i+1])]; ok && mg.rank < bestRank {
				best, bestRank, bestID = i, mg.rank, mg.id
			}
		}
		if best < 0 {
			break
		}
		// Merge every non-overlapping occurrence of this pair left to right,
		// as the reference does within one rank step.
		a, b := sym[best], sym[best+1]
		w := best
		sym[w] = bestID
		w++
		for i := best + 2; i < len(sym); i++ {
			if i+1 < len(sym) && sym[i] == a && sym[i+1] == b {
				sym[w] = bestID
				w++
				i++
				continue
			}
			sym[w] = sym[i]
			w++
		}
		sym = sym[:w]
	}
	return append(dst, sym...), sym
}

// mergeLong is the O(n log n) merge for long pieces (whitespace runs, long
// words): a doubly linked list of symbols and a heap of candidate pairs
// ordered by (rank, position); stale heap entries are skipped.
func (m *bpe) mergeLong(dst []int32, sym []int32) []int32 {
	n := len(sym)
	id := sym
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := 0; i < n; i++ {
		prev[i], next[i], alive[i] = int32(i-1), int32(i+1), true
	}
	next[n-1] = -1
	h := &pairHeap{}
	push := func(i int32) {
		j := next[i]
		if i < 0 || j < 0 {
			return
		}
		if mg, ok := m.merges[pairKey(id[i], id[j])]; ok {
			h.push(cand{rank: mg.rank, pos: i, left: id[i], right: id[j]})
		}
	}
	for i := int32(0); i < int32(n-1); i++ {
		push(i)
	}
	for h.len() > 0 {
		c := h.pop()
		i := c.pos
		if !alive[i] || id[i] != c.left {
			continue
		}
		j := next[i]
		if j < 0 || id[j] != c.right {
			continue
		}
		id[i] = m.merges[pairKey(c.left, c.right)].id
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if prev[i] >= 0 {
			push(prev[i])
		}
		push(i)
	}
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, id[i])
	}
	return dst
}

type cand struct {
	rank, pos   int32
	left, right int32
}

// pairHeap is a min-heap on (rank, pos).
type pairHeap struct{ a []cand }

func (h *pairHeap) len() int { return len(h.a) }

func less(x, y cand) bool { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos) }

func (h *pairHeap) push(c cand) {
	h.a = append(h.a, c)
	i := len(h.a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h.a[i], h.a[p]) {
			break
		}
		h.a[i], h.a[p] = h.a[p], h.a[i]
		i = p
	}
}

func (h *pairHeap) pop() cand {
	top := h.a[0]
	last := len(h.a) - 1
	h.a[0] = h.a[last]
	h.a = h.a[:last]
	i := 0
	for {
		l, r, s := 2*i+1, 2*i+2, i
		if l < len(h.a) && less(h.a[l], h.a[s]) {
			s = l
		}
		if r < len(h.a) && less(h.a[r], h.a[s]) {
			s = r
		}
		if s == i {
			return top
		}
		h.a[i], h.a[s] = h.a[s], h.a[i]
		i = s
	}
}

// byteLevelChars is GPT-2's bytes_to_unicode table: printable bytes map to
// themselves, the rest to U+0100 onwards in byte order.
func byteLevelChars() (enc [256]rune, dec map[rune]byte) {
	dec = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			enc[b] = rune(b)
		} else {
			enc[b] = rune(256 + n)
			n++
		}
		dec[enc[b]] = byte(b)
	}
	return enc, dec
}
