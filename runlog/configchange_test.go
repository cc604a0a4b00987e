package runlog

import (
	"context"
	"slices"
	"testing"
)

// TestConfigChangedRoundTrip: a ConfigChanged survives the log and makes
// its digest the run's.
func TestConfigChangedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := [32]byte{1}, [32]byte{2}
	ch := ConfigChanged{Digest: d1, Changes: []string{"optim.lr: 0.001 -> 0.002", "run.max_steps: 3 -> 5"}}
	if _, err := l.Append(ctx, RunStarted{ConfigDigest: d0, Seed: 1, Mode: "deterministic"}, ch); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got [32]byte
	l.View(func(s *State) { got = s.ConfigDigest })
	if got != d1 {
		t.Fatalf("config digest after ConfigChanged = %x, want %x", got[:2], d1[:2])
	}
	var seen []ConfigChanged
	if err := l.Events(ctx, func(_ Offset, ev Event) error {
		if v, ok := ev.(ConfigChanged); ok {
			seen = append(seen, v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Digest != d1 || !slices.Equal(seen[0].Changes, ch.Changes) {
		t.Fatalf("read back %+v, want %+v", seen, ch)
	}
}
