package crashtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/testkit/proctest"
)

// serverRendering is `tokenizer.source: server` against a real-tokenizer
// server: two deterministic runs of the tool agent from modelDir (a tiny
// Qwen3 with the real tokenizer, trained to write tool calls, which the
// agent sends back with their results), each generating through its own
// `longhaul serve --model DIR` process on loopback; one renders its
// prompts in Go (source local), the other asks its server's /tokenize
// (messages, tools, add_generation_prompt). They must log the same calls
// (tokens, logprobs, versions), train the same prompts and end with the
// same weights; the second server must have rendered every call's prompt
// and the first none.
func serverRendering(t *testing.T, bin, cfg, modelDir string, overrides []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run := func(name, source string) (string, int) {
		port := proctest.FreePort(t)
		serveProc(t, bin, port, "serve", "--model", modelDir)
		dir := filepath.Join(t.TempDir(), name)
		o := Options{Binary: bin, Config: cfg, Overrides: append(slices.Clone(overrides), "tokenizer.source="+source,
			"generator.kind=openai", fmt.Sprintf("generator.urls=http://127.0.0.1:%d/v1", port))}
		p := o.start(ctx, dir, "")
		if st, err := p.wait(); err != nil || st != "" {
			t.Fatalf("%s run: %q %v\n%s", name, st, err, p.out.String())
		}
		return dir, tokenizeCalls(t, port)
	}
	localDir, localRenders := run("local", "local")
	serverDir, serverRenders := run("server", "server")
	want, err := Summarize(ctx, localDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Summarize(ctx, serverDir)
	if err != nil {
		t.Fatal(err)
	}
	share, _ := toolCallShare(t, localDir, modelDir)
	t.Logf("%d calls (%.2f of them tool calls), %d steps; /tokenize answered %d renders for the server run, %d for the local one",
		want.Calls, share, want.Steps, serverRenders, localRenders)
	if want.Calls == 0 || want.Steps != 2 || share == 0 {
		t.Fatalf("the runs prove little: %d calls, %d steps, tool-call share %.2f", want.Calls, want.Steps, share)
	}
	if localRenders != 0 || serverRenders < int(want.Calls) {
		t.Fatalf("/tokenize renders: local run %d (want 0), server run %d (want ≥ %d calls)", localRenders, serverRenders, want.Calls)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("tokenizer.source server differs from local: %s", d)
	}
}

// tokenizeCalls is how many /tokenize requests a server answered 200.
func tokenizeCalls(t *testing.T, port int) int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, `longhaul_server_requests_total{code="200",endpoint="/tokenize"}`) {
			n, err := strconv.ParseFloat(strings.Fields(l)[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	return 0
}
