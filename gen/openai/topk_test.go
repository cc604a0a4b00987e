package openai

import (
	"encoding/json"
	"testing"

	"github.com/longhaul-rl/longhaul/gen"
)

// top_k is always sent, -1 for off: a server that fills a missing field
// from the model's generation_config.json (vLLM, longhaul serve --model)
// must not sample with the model's top_k when the run samples without.
func TestTopKAlwaysSent(t *testing.T) {
	for _, api := range []string{APIOpenAI, APIVLLM, APISGLang} {
		for _, k := range []int{0, 5} {
			c := &Client{opts: Options{API: api}}
			_, body, err := c.encodeRequest(&gen.Request{Prompt: []int32{1}, MaxTokens: 2, Temperature: 1, TopK: k}, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			if sp, ok := m["sampling_params"]; ok {
				m = nil
				_ = json.Unmarshal(sp, &m)
			}
			want := "-1"
			if k > 0 {
				want = "5"
			}
			if got := string(m["top_k"]); got != want {
				t.Errorf("%s, TopK %d: top_k %q, want %s", api, k, got, want)
			}
		}
	}
}
