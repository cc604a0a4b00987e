package runner

import (
	"strings"
	"testing"
)

func TestParseDemosErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"task": {"id": "a"}, "calls": ["1"]}` + "\n" + `{"task": {}, "calls": ["1"], "extra": 1}`, "demos.jsonl:2: bad demonstration"},
		{`{"task": {"id": "a"}, "calls": []}`, "demos.jsonl:1: demonstration has no \"calls\""},
		{"\n\n{not json", "demos.jsonl:3: bad demonstration"},
		{"", "demos.jsonl: no demonstrations"},
	} {
		_, err := ParseDemos("demos.jsonl", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	d, err := ParseDemos("demos.jsonl", strings.NewReader(`{"task": {"id": "a", "params": {"pages": [1]}}, "calls": ["read 1", "answer 3"]}`+"\n"))
	if err != nil || len(d) != 1 || d[0].Task.ID != "a" || len(d[0].Calls) != 2 || d[0].line != 1 {
		t.Fatalf("%+v %v", d, err)
	}
}
