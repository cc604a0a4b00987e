// Package segment turns a rollout's model calls into segments: maximal
// runs of calls whose prompts are exact token-prefix continuations of the
// previous prompt + sample. A segment is one training row.
//
// Continuation is decided on token ids only, never by re-tokenizing text.
// Calls arrive in the run log's delta form (runlog.CallFinished): a call
// with PromptPrefix == len(context) extends it by construction, so the
// common case costs nothing per prompt token; a smaller PromptPrefix is a
// candidate break, settled by comparing the tokens after it. A break must
// match a declared boundary (runlog.Compaction); a declared boundary must
// match a break.
package segment

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// What to do with a prefix break that no boundary declares
// (config `on_undeclared_break`).
const (
	OnBreakError = "error" // default: fail with a minimal diff
	OnBreakSplit = "split" // start a new segment and train it
	OnBreakMask  = "mask"  // start a new segment and train none of it
)

// Config configures Build.
type Config struct {
	OnUndeclaredBreak string `json:"on_undeclared_break"`
	// DiffWindow is how many tokens each side of the first difference an
	// undeclared-break error shows; default 8.
	DiffWindow int `json:"diff_window"`
	// Tokenizer renders those tokens as text in the error (the run's
	// tokenizer); nil shows their ids.
	Tokenizer lhtok.Tokenizer `json:"-"`
	// MaskSummaries takes the tokens of summary calls (the calls whose
	// reply a summarizing compaction folded into the context) out of the
	// loss: mask 0, not trainable. The policy still writes the summaries
	// and reads them, and learns everything else; the summaries stay what
	// the weights make of them without being trained (grpo.summary_credit:
	// masked).
	MaskSummaries bool `json:"mask_summaries"`
}

// How a segment began.
const (
	StartFirst      = "first"      // the rollout's first selected call
	StartDeclared   = "declared"   // a declared boundary (compaction)
	StartUndeclared = "undeclared" // an undeclared break, split or masked by config
)

// Span is the sampled tokens of one selected call inside a segment.
type Span struct {
	Start, End int // token positions [Start, End)
	Call       uint32
	Version    int64
	// Summary marks a summary call: a summarizing compaction's boundary
	// (one whose lineage folds messages into a summary) follows it.
	Summary bool
	// Masked marks a span out of the loss (Config.MaskSummaries): mask 0
	// at its tokens.
	Masked bool
}

// Segment is one training row of a rollout.
type Segment struct {
	Rollout   runlog.RolloutID
	Index     int
	Start     string // Start* constant
	FirstCall uint32
	LastCall  uint32
	Tokens    []int32
	Mask      []uint8   // 1 at sampled tokens of selected calls (0 everywhere when Masked)
	Logprobs  []float32 // behaviour logprob at sampled tokens, 0 elsewhere
	Spans     []Span    // sampled spans in order: the version of every sampled token
	Masked    bool
}

// Trainable returns the number of trainable tokens.
func (s *Segment) Trainable() int {
	if s.Masked {
		return 0
	}
	n := 0
	for _, sp := range s.Spans {
		if !sp.Masked {
			n += sp.End - sp.Start
		}
	}
	return n
}

// SummaryTokens returns the number of trainable tokens of summary calls.
func (s *Segment) SummaryTokens() int {
	if s.Masked {
		return 0
	}
	n := 0
	for _, sp := range s.Spans {
		if sp.Summary && !sp.Masked {
			n += sp.End - sp.Start
		}
	}
	return n
}

// Versions returns the policy version of every token (-1 where the token
// was not sampled).
func (s *Segment) Versions() []int64 {
	v := make([]int64, len(s.Tokens))
	for i := range v {
		v[i] = -1
	}
	for _, sp := range s.Spans {
		for i := sp.Start; i < sp.End; i++ {
			v[i] = sp.Version
		}
	}
	return v
}

// Row returns the segment as a train.Row with advantage adv on every
// trainable token. The row shares Tokens, Mask and Logprobs with s.
func (s *Segment) Row(adv float32) train.Row {
	a := make([]float32, len(s.Tokens))
	if adv != 0 {
		for i, m := range s.Mask {
			if m != 0 {
				a[i] = adv
			}
		}
	}
	return train.Row{Tokens: s.Tokens, Mask: s.Mask, Advantages: a, OldLogprobs: s.Logprobs}
}

// Stats counts what Build saw.
type Stats struct {
	Calls      int // calls given, rejected ones included
	Rejected   int
	Segments   int
	Declared   int // breaks matched by a declared boundary
	Undeclared int // breaks split or masked by config
	Sampled    int // sampled tokens of selected calls
	Trainable  int
	Summaries  int // summary calls
	Summary    int // sampled tokens of summary calls
}

// Errors of Build; a *BreakError matches ErrUndeclaredBreak with errors.Is.
var (
	ErrUndeclaredBreak      = errors.New("segment: prefix break without a declared boundary")
	ErrBoundaryWithoutBreak = errors.New("segment: declared boundary without a prefix break")
	ErrContract             = errors.New("segment: call evidence breaks the contract")
)

// BreakError describes an undeclared prefix break with a minimal diff of
// the two token sequences.
type BreakError struct {
	Rollout    runlog.RolloutID
	Call       uint32
	Pos        int // first differing token position
	ContextLen int // tokens of the previous context (prompt + sample)
	PromptLen  int
	From       int    // position of the window's first token
	Context    string // decoded window of the previous context
	Prompt     string // decoded window of the new prompt
}

func (e *BreakError) Error() string {
	return fmt.Sprintf("segment: rollout %d/%d call %d: prefix break without a declared boundary: first difference at token %d (context %d tokens, prompt %d); from token %d:\n  context: %q\n  prompt:  %q",
		e.Rollout.Group, e.Rollout.Member, e.Call, e.Pos, e.ContextLen, e.PromptLen, e.From, e.Context, e.Prompt)
}

// Is makes errors.Is(err, ErrUndeclaredBreak) hold.
func (e *BreakError) Is(target error) bool { return target == ErrUndeclaredBreak }

// Build builds the segments of one rollout: Plan, then Materialize.
// calls are its calls in call order (rejected ones are skipped: they are
// never trained); boundaries are its declared compactions. A boundary
// with AfterCall = k applies to the first selected call after call k;
// boundaries after the last selected call are ignored (the rollout ended
// before using the new context).
func Build(calls []runlog.CallFinished, boundaries []runlog.Compaction, cfg Config) ([]Segment, Stats, error) {
	p, err := MakePlan(calls, boundaries, cfg)
	if err != nil {
		return nil, p.Stats, err
	}
	return p.Materialize(), p.Stats, nil
}

// piece is a run of a segment's tokens, a view into a call's evidence.
type piece struct {
	toks    []int32
	lps     []float32 // non-nil for the sampled tokens of a selected call
	call    uint32
	version int64
	summary bool // the sampled tokens of a summary call
}

type planSeg struct {
	start   string
	masked  bool
	first   uint32
	last    uint32
	p0, p1  int // pieces[p0:p1]
	n       int // tokens
	rollout runlog.RolloutID
}

// Plan is the segment structure of a rollout, checked, with its tokens
// still in the calls (no copies): what Build does before materializing.
type Plan struct {
	Stats         Stats
	pieces        []piece
	segs          []planSeg
	maskSummaries bool
}

// MakePlan checks the calls' prefix continuity against the declared
// boundaries and lays out the segments without copying tokens. The plan
// refers to the calls' slices; do not modify them before Materialize.
func MakePlan(calls []runlog.CallFinished, boundaries []runlog.Compaction, cfg Config) (Plan, error) {
	pl := Plan{maskSummaries: cfg.MaskSummaries}
	st := &pl.Stats
	st.Calls = len(calls)
	mode := cfg.OnUndeclaredBreak
	switch mode {
	case "":
		mode = OnBreakError
	case OnBreakError, OnBreakSplit, OnBreakMask:
	default:
		return pl, fmt.Errorf("segment: unknown on_undeclared_break %q", mode)
	}
	byAfter := func(a, b runlog.Compaction) int { return int(a.AfterCall) - int(b.AfterCall) }
	if !slices.IsSortedFunc(boundaries, byAfter) {
		boundaries = slices.Clone(boundaries)
		slices.SortStableFunc(boundaries, byAfter)
	}
	pl.pieces = make([]piece, 0, 2*len(calls)+4*len(boundaries))
	pl.segs = make([]planSeg, 0, len(boundaries)+1)
	bi := 0
	for i := range calls {
		c := &calls[i]
		if len(c.Sampled) != len(c.Logprobs) {
			return pl, fmt.Errorf("%w: call %d has %d sampled tokens and %d logprobs", ErrContract, c.Call, len(c.Sampled), len(c.Logprobs))
		}
		if i > 0 && c.Call <= calls[i-1].Call {
			return pl, fmt.Errorf("%w: call %d follows call %d", ErrContract, c.Call, calls[i-1].Call)
		}
		if !c.Selected {
			st.Rejected++
			continue
		}
		var declared *runlog.Compaction
		for bi < len(boundaries) && boundaries[bi].AfterCall < c.Call {
			if declared != nil {
				return pl, fmt.Errorf("%w: boundaries %d and %d both precede call %d with no call between", ErrContract, declared.Boundary, boundaries[bi].Boundary, c.Call)
			}
			declared = &boundaries[bi]
			bi++
		}
		if len(pl.segs) == 0 {
			if declared != nil {
				return pl, fmt.Errorf("%w: boundary %d precedes the first selected call %d", ErrBoundaryWithoutBreak, declared.Boundary, c.Call)
			}
			if c.PromptPrefix != 0 {
				return pl, fmt.Errorf("%w: first selected call %d has PromptPrefix %d with no context before it", ErrContract, c.Call, c.PromptPrefix)
			}
			pl.open(c, StartFirst, 0, false)
		} else {
			cur := &pl.segs[len(pl.segs)-1]
			p := int(c.PromptPrefix)
			if p > cur.n {
				return pl, fmt.Errorf("%w: call %d has PromptPrefix %d beyond its %d-token context", ErrContract, c.Call, p, cur.n)
			}
			d := p
			if p < cur.n { // a candidate break: settle it on the tokens
				d += pl.commonPrefix(cur, p, c.PromptSuffix)
			}
			switch {
			case d == cur.n: // an exact continuation
				if declared != nil {
					return pl, fmt.Errorf("%w: boundary %d (%s, after call %d) but call %d extends the previous context exactly",
						ErrBoundaryWithoutBreak, declared.Boundary, declared.Policy, declared.AfterCall, c.Call)
				}
				pl.add(piece{toks: c.PromptSuffix[d-p:]})
			case declared != nil:
				st.Declared++
				pl.open(c, StartDeclared, p, false)
			case mode == OnBreakError:
				return pl, pl.breakError(c, cfg.DiffWindow, d, cfg.Tokenizer)
			default:
				st.Undeclared++
				pl.open(c, StartUndeclared, p, mode == OnBreakMask)
			}
		}
		cur := &pl.segs[len(pl.segs)-1]
		summary := summarizes(boundaries[bi:], c.Call)
		pl.add(piece{toks: c.Sampled, lps: c.Logprobs, call: c.Call, version: c.Version, summary: summary})
		cur.last = c.Call
		st.Sampled += len(c.Sampled)
		if summary {
			st.Summaries++
			st.Summary += len(c.Sampled)
		}
		if !cur.masked && !(summary && cfg.MaskSummaries) {
			st.Trainable += len(c.Sampled)
		}
	}
	st.Segments = len(pl.segs)
	return pl, nil
}

// summarizes reports whether a summarizing boundary follows call: one
// with AfterCall == call whose lineage folds messages into a summary (the
// summary call is the last call before its boundary). bs is sorted by
// AfterCall and starts after the boundaries of earlier calls.
func summarizes(bs []runlog.Compaction, call uint32) bool {
	for _, b := range bs {
		if b.AfterCall != call {
			return false
		}
		for _, ln := range b.Lineage {
			if ln.Op == runlog.OpSummarized {
				return true
			}
		}
	}
	return false
}

// add appends a piece to the open segment.
func (pl *Plan) add(pc piece) {
	if len(pc.toks) == 0 {
		return
	}
	s := &pl.segs[len(pl.segs)-1]
	pl.pieces = append(pl.pieces, pc)
	s.p1 = len(pl.pieces)
	s.n += len(pc.toks)
}

// open starts a segment whose prompt is the first p tokens of the open
// segment (now prompt context, never trained) followed by c's suffix.
func (pl *Plan) open(c *runlog.CallFinished, start string, p int, masked bool) {
	ns := planSeg{start: start, masked: masked, first: c.Call, rollout: c.Rollout, p0: len(pl.pieces), p1: len(pl.pieces)}
	if len(pl.segs) > 0 {
		prev := pl.segs[len(pl.segs)-1]
		pl.segs = append(pl.segs, ns)
		for i := prev.p0; i < prev.p1 && p > 0; i++ {
			t := pl.pieces[i].toks
			if len(t) > p {
				t = t[:p]
			}
			p -= len(t)
			pl.add(piece{toks: t})
		}
	} else {
		pl.segs = append(pl.segs, ns)
	}
	pl.add(piece{toks: c.PromptSuffix})
}

// commonPrefix compares segment s's tokens from position p with b.
func (pl *Plan) commonPrefix(s *planSeg, p int, b []int32) int {
	n := 0
	for i := s.p0; i < s.p1; i++ {
		t := pl.pieces[i].toks
		if p >= len(t) {
			p -= len(t)
			continue
		}
		t = t[p:]
		p = 0
		k := commonPrefix(t, b[n:])
		n += k
		if k < len(t) {
			return n
		}
	}
	return n
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// tokens materializes segment s's tokens (for diagnostics).
func (pl *Plan) tokens(s *planSeg) []int32 {
	out := make([]int32, 0, s.n)
	for _, pc := range pl.pieces[s.p0:s.p1] {
		out = append(out, pc.toks...)
	}
	return out
}

// Materialize copies the plan's tokens into segments. All segments of the
// rollout share one buffer per field; each is a capacity-limited window,
// so appending to one never writes into another.
func (pl *Plan) Materialize() []Segment {
	if len(pl.segs) == 0 {
		return nil
	}
	total, nspan := 0, 0
	for _, s := range pl.segs {
		total += s.n
	}
	for _, pc := range pl.pieces {
		if pc.lps != nil {
			nspan++
		}
	}
	toks := make([]int32, total)
	mask := make([]uint8, total)
	lps := make([]float32, total)
	spans := make([]Span, 0, nspan)
	out := make([]Segment, len(pl.segs))
	off := 0
	for k, s := range pl.segs {
		base, sp0 := off, len(spans)
		for _, pc := range pl.pieces[s.p0:s.p1] {
			copy(toks[off:], pc.toks)
			if pc.lps != nil {
				copy(lps[off:], pc.lps)
				out := pc.summary && pl.maskSummaries
				if !s.masked && !out {
					m := mask[off : off+len(pc.toks)]
					for i := range m {
						m[i] = 1
					}
				}
				spans = append(spans, Span{Start: off - base, End: off - base + len(pc.toks), Call: pc.call, Version: pc.version,
					Summary: pc.summary, Masked: out})
			}
			off += len(pc.toks)
		}
		out[k] = Segment{
			Rollout: s.rollout, Index: k, Start: s.start, FirstCall: s.first, LastCall: s.last, Masked: s.masked,
			Tokens: toks[base:off:off], Mask: mask[base:off:off], Logprobs: lps[base:off:off],
			Spans: spans[sp0:len(spans):len(spans)],
		}
	}
	return out
}

func (pl *Plan) breakError(c *runlog.CallFinished, w, d int, tok lhtok.Tokenizer) error {
	decode := func(ids []int32) string { return fmt.Sprint(ids) }
	if tok != nil {
		decode = tok.Decode
	}
	if w <= 0 {
		w = 8
	}
	cur := pl.tokens(&pl.segs[len(pl.segs)-1])
	p := int(c.PromptPrefix)
	plen := p + len(c.PromptSuffix)
	from := max(0, d-w)
	prompt := append(slices.Clone(cur[:p]), c.PromptSuffix...)
	return &BreakError{
		Rollout: c.Rollout, Call: c.Call, Pos: d, ContextLen: len(cur), PromptLen: plen, From: from,
		Context: ellipsis(from > 0, decode(cur[from:min(len(cur), d+w)]), d+w < len(cur)),
		Prompt:  ellipsis(from > 0, decode(prompt[from:min(plen, d+w)]), d+w < plen),
	}
}

func ellipsis(pre bool, s string, post bool) string {
	var b strings.Builder
	if pre {
		b.WriteString("…")
	}
	b.WriteString(s)
	if post {
		b.WriteString("…")
	}
	return b.String()
}
