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
func (g GroupID) String() string { return fmt.Sprintf("g%016x", uint64(g)) }

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
func (r RolloutID) String() string { return fmt.Sprintf("%s-%d", r.Group, r.Member) }

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
