package remote

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/server"
	"github.com/longhaul-rl/longhaul/tokenizer"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// TestServerRenderingMatchesLocal: `longhaul serve`'s POST /tokenize with
// messages renders exactly what the byte template renders locally, and a
// bridge over the server yields the same prompts as over the local chat.
func TestServerRenderingMatchesLocal(t *testing.T) {
	s, err := server.New(server.NewFake(1).Backend("m"), server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	rc := &Chat{BaseURL: ts.URL, Model: "m", Client: ts.Client(), Tok: bytetok.Tok{}}
	ctx := context.Background()
	msgs := []tokenizer.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "héllo"}}
	for _, gen := range []bool{false, true} {
		got, err := rc.RenderTokens(ctx, msgs, tokenizer.RenderOptions{AddGenerationPrompt: gen})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := bytetok.Chat{}.RenderTokens(ctx, msgs, tokenizer.RenderOptions{AddGenerationPrompt: gen})
		if !slices.Equal(got, want) {
			t.Fatalf("generate=%v: server %v, local %v", gen, got, want)
		}
	}
	br, err := bridge.New(ctx, rc, bridge.Append, tokenizer.RenderOptions{}, msgs)
	if err != nil {
		t.Fatal(err)
	}
	bl, _ := bridge.New(ctx, bytetok.Chat{}, bridge.Append, tokenizer.RenderOptions{}, msgs)
	for i := 0; i < 5; i++ {
		sampled := append(bytetok.Tok{}.Encode("ok "+strings.Repeat("x", i)), bytetok.Tok{}.StopTokens()...)
		msg := tokenizer.Message{Role: "assistant", Content: "ok " + strings.Repeat("x", i)}
		next := []tokenizer.Message{{Role: "user", Content: "again"}}
		a, err := br.Next(ctx, sampled, msg, next)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := bl.Next(ctx, sampled, msg, next)
		if !slices.Equal(a.Prompt, b.Prompt) || a.Diverged != nil {
			t.Fatalf("turn %d: server bridge %v, local %v (diverged %v)", i, a.Prompt, b.Prompt, a.Diverged)
		}
	}
	// A bad message is the server's 400, reported with its text.
	_, err = rc.RenderTokens(ctx, []tokenizer.Message{{Role: "wizard", Content: "x"}}, tokenizer.RenderOptions{})
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "role") {
		t.Fatalf("bad role: %v", err)
	}
}
