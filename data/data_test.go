package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseJSONL(t *testing.T) {
	src := `{"id": "a", "task": {"x": 1}}

{"id": "b", "task": {"x": 2}}` + "\r\n" + `{"id":"c","task":[1,2]}`
	ds, err := ParseJSONL("p.jsonl", strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 3 {
		t.Fatalf("len = %d", ds.Len())
	}
	p, err := ds.Prompt(1)
	if err != nil || p.ID != "b" || string(p.Task) != `{"x": 2}` {
		t.Fatalf("prompt 1 = %+v, %v", p, err)
	}
	if _, err := ds.Prompt(3); !errors.Is(err, ErrIndex) {
		t.Fatalf("out of range: %v", err)
	}
}

func TestParseJSONLErrors(t *testing.T) {
	good := `{"id": "a", "task": {}}` + "\n"
	for _, tc := range []struct{ name, line, want string }{
		{"not json", `{"id": "x", "task": `, "p.jsonl:2: bad row"},
		{"not object", `[1, 2]`, "p.jsonl:2: bad row"},
		{"no id", `{"task": {}}`, `p.jsonl:2: bad row: missing "id"`},
		{"empty id", `{"id": "", "task": {}}`, `p.jsonl:2: bad row: missing "id"`},
		{"id type", `{"id": 3, "task": {}}`, "p.jsonl:2: bad row"},
		{"no task", `{"id": "x"}`, `p.jsonl:2: bad row "x": missing "task"`},
		{"null task", `{"id": "x", "task": null}`, `missing "task"`},
		{"unknown field", `{"id": "x", "task": {}, "answer": 3}`, `p.jsonl:2: bad row: json: unknown field "answer"`},
		{"two values", `{"id": "x", "task": {}} {"id": "y", "task": {}}`, "p.jsonl:2: bad row: more than one JSON value"},
		{"duplicate", `{"id": "a", "task": {"y": 1}}`, `p.jsonl:2: duplicate id "a" (first at line 1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJSONL("p.jsonl", strings.NewReader(good+tc.line+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReadJSONL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte(`{"id":"a","task":{}}`+"\n"+`{"id":"b","task":{}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := ReadJSONL(path)
	if err != nil || ds.Len() != 2 {
		t.Fatalf("%v, %v", ds, err)
	}
	if _, err := ReadJSONL(filepath.Join(t.TempDir(), "none.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func TestGenerated(t *testing.T) {
	boom := errors.New("boom")
	g := NewGenerated(3, func(i int) (Prompt, error) {
		if i == 2 {
			return Prompt{}, boom
		}
		return Prompt{ID: fmt.Sprint("g", i), Task: []byte(`{}`)}, nil
	})
	if p, err := g.Prompt(1); err != nil || p.ID != "g1" {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := g.Prompt(2); !errors.Is(err, boom) {
		t.Fatalf("fn error not wrapped: %v", err)
	}
	if _, err := g.Prompt(-1); !errors.Is(err, ErrIndex) {
		t.Fatalf("%v", err)
	}
}

// TestParseJSONLByteOrderMark: a UTF-8 byte order mark before the first
// row (Windows editors write one) is not part of the row; a UTF-16 one
// is refused by name, and a mark anywhere else is still a bad row.
func TestParseJSONLByteOrderMark(t *testing.T) {
	bom := "\xef\xbb\xbf"
	ds, err := ParseJSONL("p.jsonl", strings.NewReader(bom+`{"id": "a", "task": {}}`+"\n"+`{"id": "b", "task": {}}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := ds.Prompt(0); ds.Len() != 2 || p.ID != "a" {
		t.Fatalf("%d prompts, first %+v", ds.Len(), p)
	}
	if ds, err := ParseJSONL("p.jsonl", strings.NewReader(bom)); err != nil || ds.Len() != 0 {
		t.Fatalf("a mark alone: %v, %v", ds, err)
	}
	if _, err := ParseJSONL("p.jsonl", strings.NewReader("\xff\xfe{\x00")); err == nil || !strings.Contains(err.Error(), "p.jsonl:1: the file starts with a UTF-16 byte order mark") {
		t.Fatalf("UTF-16: %v", err)
	}
	if _, err := ParseJSONL("p.jsonl", strings.NewReader(`{"id": "a", "task": {}}`+"\n"+bom+`{"id": "b", "task": {}}`)); err == nil || !strings.Contains(err.Error(), "p.jsonl:2: bad row") {
		t.Fatalf("a mark on line 2: %v", err)
	}
}
