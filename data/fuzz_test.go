package data

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseJSONL: any bytes either load or fail with an error naming the
// file and a line; what loads has unique non-empty ids and a task of
// valid JSON, and written back as JSON Lines loads to the same prompts.
// The seeds run in every `go test`; `go test -fuzz FuzzParseJSONL ./data`
// explores (.ci/steps/19-fuzz.sh runs it briefly).
func FuzzParseJSONL(f *testing.F) {
	for _, s := range []string{
		`{"id": "a", "task": {"x": 1}}` + "\n" + `{"id": "b", "task": [1]}`,
		"\xef\xbb\xbf" + `{"id": "a", "task": {}}` + "\r\n",
		"\n\n" + `{"id":"c","task":"t"}`,
		`{"id": "a", "task": {}}` + "\n" + `{"id": "a", "task": {}}`,
		`{"id": "x", "task": null}`,
		`{"id": "x", "task": {}, "extra": 1}`,
		`{"id": "x", "task": {}} {"id": "y", "task": {}}`,
		"\xff\xfe{\x00",
		`{"id": "\u00e9", "task": {"nested": {"deep": [1, 2, {"k": null}]}}}`,
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := ParseJSONL("f.jsonl", bytes.NewReader(b))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.jsonl:") {
				t.Fatalf("error names no file and line: %v", err)
			}
			return
		}
		var again bytes.Buffer
		seen := map[string]bool{}
		for i := range ds.Len() {
			p, err := ds.Prompt(i)
			if err != nil {
				t.Fatal(err)
			}
			if p.ID == "" || seen[p.ID] || !json.Valid(p.Task) || string(p.Task) == "null" {
				t.Fatalf("prompt %d loaded: %+v", i, p)
			}
			seen[p.ID] = true
			line, err := json.Marshal(map[string]any{"id": p.ID, "task": p.Task})
			if err != nil {
				t.Fatal(err)
			}
			again.Write(append(line, '\n'))
		}
		back, err := ParseJSONL("again.jsonl", &again)
		if err != nil {
			t.Fatalf("written back, it does not load: %v", err)
		}
		if back.Len() != ds.Len() {
			t.Fatalf("written back: %d prompts, want %d", back.Len(), ds.Len())
		}
		for i := range ds.Len() {
			p, _ := ds.Prompt(i)
			q, _ := back.Prompt(i)
			var a, c any
			if p.ID != q.ID || json.Unmarshal(p.Task, &a) != nil || json.Unmarshal(q.Task, &c) != nil {
				t.Fatalf("prompt %d: %+v written back as %+v", i, p, q)
			}
		}
	})
}
