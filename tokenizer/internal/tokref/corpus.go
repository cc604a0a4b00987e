package tokref

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// CorpusItem is one line of corpus.jsonl (test/tokenizers/README.md): a
// text to encode or a chat to render, for one model.
type CorpusItem struct {
	ID    string `json:"id"`
	Model string `json:"model"`
	Kind  string `json:"kind"` // "text" or "chat"
	Text  string `json:"text"`
	// Messages are in the shape the model's template takes (chat.Wire).
	Messages            json.RawMessage   `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Kwargs              map[string]any    `json:"kwargs"`
	// PyOnly: the chat holds inputs where @huggingface/jinja departs from
	// Python Jinja; only Python's render is the reference.
	PyOnly bool `json:"py_only"`
}

// CorpusRef is one line of reference.jsonl: the official references'
// answer for the item of the same ID.
type CorpusRef struct {
	ID string `json:"id"`
	// IDs: transformers.js's ids of the text, or of Python's render.
	IDs []int32 `json:"ids"`
	// Decoded: transformers.js's decoding of IDs (texts).
	Decoded string `json:"decoded"`
	// Text or Error: Python Jinja2's render of a chat.
	Text  *string `json:"text"`
	Error string  `json:"error"`
	// JSText or JSError: @huggingface/jinja's render of a chat.
	JSText  *string `json:"js_text"`
	JSError string  `json:"js_error"`
}

// CorpusEnv names a directory holding corpus.jsonl and reference.jsonl
// (test/tokenizers/reference.sh writes them); the CI step makes them once
// for every package's test.
const CorpusEnv = "LONGHAUL_TOKENIZER_CORPUS"

// Corpus returns the independent corpus and its reference answers: from
// $LONGHAUL_TOKENIZER_CORPUS, or made by reference.sh in a temporary
// directory (Full: 2,400 texts and 300 chats per model, else 100 and 20).
// It needs node and Python's jinja2 (.ci/steps/13-setup.sh): without them
// it skips, or fails under LONGHAUL_REQUIRE_TOKENIZERS=1.
func Corpus(t testing.TB) ([]CorpusItem, map[string]CorpusRef) {
	t.Helper()
	dir := os.Getenv(CorpusEnv)
	if dir == "" {
		root := Require(t)
		py := os.Getenv("LONGHAUL_PYTHON")
		if py == "" {
			py = "/usr/bin/python3"
		}
		if err := exec.Command(py, "-c", "import jinja2").Run(); err != nil {
			missing := py + " cannot import jinja2 (run .ci/steps/13-setup.sh, or apt-get install python3-jinja2)"
			if os.Getenv("LONGHAUL_REQUIRE_TOKENIZERS") == "1" {
				t.Fatalf("tokenizer reference required: %s", missing)
			}
			t.Skip(missing)
		}
		texts, chats := 100, 20 // the defects' cases come first
		if Full() {
			texts, chats = 2400, 300
		}
		dir = t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "reference.sh"), dir,
			"--texts", strconv.Itoa(texts), "--chats", strconv.Itoa(chats))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("reference.sh: %v\n%s", err, out)
		}
	}
	var items []CorpusItem
	readLines(t, filepath.Join(dir, "corpus.jsonl"), func(b []byte) error {
		var it CorpusItem
		err := json.Unmarshal(b, &it)
		items = append(items, it)
		return err
	})
	refs := map[string]CorpusRef{}
	readLines(t, filepath.Join(dir, "reference.jsonl"), func(b []byte) error {
		var r CorpusRef
		err := json.Unmarshal(b, &r)
		refs[r.ID] = r
		return err
	})
	for _, it := range items {
		if _, ok := refs[it.ID]; !ok {
			t.Fatalf("%s: no reference answer for %s", dir, it.ID)
		}
	}
	return items, refs
}

func readLines(t testing.TB, path string, line func([]byte) error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		if err := line(sc.Bytes()); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
