package runlog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/longhaul-rl/longhaul/internal/rng"
)

// NewGroupID derives the id of the group admitted at (epoch, cursor) of the
// run with this seed. It depends on nothing else, so a resumed run that
// re-admits the same cursor gets the same id.
func NewGroupID(seed uint64, epoch uint32, cursor uint64) GroupID {
	return GroupID(rng.Derive(seed, "group", uint64(epoch), cursor))
}

// String renders the id as "g" followed by 16 lower-case hex digits.
func (g GroupID) String() string {
	var b [17]byte
	return string(g.append(b[:0]))
}

// append appends String's form without fmt: every rollout names its
// group and itself for its environment's keys.
func (g GroupID) append(b []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, 'g')
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hex[uint64(g)>>shift&0xf])
	}
	return b
}

// ParseGroupID parses the form written by GroupID.String.
func ParseGroupID(s string) (GroupID, error) {
	if len(s) != 17 || s[0] != 'g' {
		return 0, fmt.Errorf("runlog: parse group id %q: want g + 16 hex digits", s)
	}
	v, err := strconv.ParseUint(s[1:], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("runlog: parse group id %q: %w", s, err)
	}
	return GroupID(v), nil
}

// String renders the id as "<group>-<member>", e.g. g0123456789abcdef-3.
func (r RolloutID) String() string {
	var b [24]byte
	return string(strconv.AppendUint(append(r.Group.append(b[:0]), '-'), uint64(r.Member), 10))
}

// ParseRolloutID parses the form written by RolloutID.String.
func ParseRolloutID(s string) (RolloutID, error) {
	gs, ms, ok := strings.Cut(s, "-")
	if !ok {
		return RolloutID{}, fmt.Errorf("runlog: parse rollout id %q: want <group>-<member>", s)
	}
	g, err := ParseGroupID(gs)
	if err != nil {
		return RolloutID{}, err
	}
	m, err := strconv.ParseUint(ms, 10, 16)
	if err != nil {
		return RolloutID{}, fmt.Errorf("runlog: parse rollout id %q: %w", s, err)
	}
	return RolloutID{Group: g, Member: uint16(m)}, nil
}
