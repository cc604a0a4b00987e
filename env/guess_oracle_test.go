package env

import (
	"context"
	"encoding/json"
	"testing"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"
)

// TestGuessOracleSolves plays the oracle against the environment on every
// secret: binary search finds each within ⌈log2(size+1)⌉ guesses.
func TestGuessOracleSolves(t *testing.T) {
	for _, size := range []int{2, 8, 16} {
		for secret := range size {
			g := &Guess{cfg: GuessConfig{Size: size, MaxGuesses: 6}}
			params, _ := json.Marshal(GuessTask{Size: size, Secret: secret})
			first, err := g.Reset(context.Background(), Task{Params: params}, 0)
			if err != nil {
				t.Fatal(err)
			}
			msgs := []lhtok.Message{{Role: lhtok.RoleUser, Content: first}}
			for turn := 0; ; turn++ {
				a, err := GuessOracle(append(msgs, lhtok.Message{Role: lhtok.RoleAssistant}))
				if err != nil {
					t.Fatalf("size %d secret %d: %v", size, secret, err)
				}
				res, err := g.Step(context.Background(), a)
				if err != nil {
					t.Fatal(err)
				}
				if res.Success {
					if limit := map[int]int{2: 2, 8: 4, 16: 5}[size]; turn+1 > limit {
						t.Fatalf("size %d secret %d: %d guesses", size, secret, turn+1)
					}
					break
				}
				if res.Done {
					t.Fatalf("size %d secret %d: not found", size, secret)
				}
				msgs = append(msgs, lhtok.Message{Role: lhtok.RoleAssistant, Content: a},
					lhtok.Message{Role: lhtok.RoleUser, Content: res.Observation})
			}
		}
	}
	if _, err := GuessOracle([]lhtok.Message{{Role: lhtok.RoleUser, Content: "start 3 +1"}}); err == nil {
		t.Fatal("a ledger prompt was read as a guess range")
	}
}
