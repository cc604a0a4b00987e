package longhaul

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/longhaul-rl/longhaul"

// floors puts every top-level folder (or a deeper one named on its own) on
// a floor: a package may import packages on lower floors, and packages of
// its own folder. The flow reads from the top: the CLI and the wiring,
// then the controller, the rollout machinery, the stores and the engine.
var floors = map[string]int{
	"cmd":        12,
	"deploy":     12, // examples; only its test imports the module
	"bench":      12,
	"runner":     11,
	"runview":    11,
	"testkit":    11, // the kill -9 proofs run whole runs
	"config":     10,
	"controller": 9,
	"metrics":    8,
	"batch":      7,
	"rollout":    6,
	"advantage":  6,
	"compaction": 5,
	"segment":    5,
	"server":     5,
	"env":        4,
	"gen":        4,
	"train":      4,
	"tokenizer":  3,
	"runlog":     4,
	"data":       3,
	"examples":   3,
	"model":      2,
	"model/kern": 1,
	"failure":    0,
	"store":      0,
	"internal":   0,
}

// floorOf returns the floor and the folder of a package path inside the
// module: the longest folder in floors that holds it.
func floorOf(rel string) (int, string, bool) {
	for p := rel; p != "." && p != ""; p = filepath.Dir(p) {
		if f, ok := floors[p]; ok {
			return f, p, true
		}
	}
	return 0, "", false
}

// TestNoImportRunsBackUp reads every non-test Go file's imports and fails
// on one that names a package on a higher floor, or a folder of the same
// floor other than its own (floors are layers, not neighbourhoods).
func TestNoImportRunsBackUp(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata" || n == "python") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		if dir == "." {
			return nil
		}
		from, fromDir, ok := floorOf(dir)
		if !ok {
			t.Errorf("%s: folder %s has no floor in layout_test.go", path, dir)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(p, module+"/")
			if !ok {
				continue
			}
			checked++
			to, toDir, ok := floorOf(rel)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which has no floor", path, rel)
			case to > from:
				t.Errorf("%s (%s, floor %d) imports %s (%s, floor %d): an import runs back up", path, fromDir, from, rel, toDir, to)
			case to == from && toDir != fromDir:
				t.Errorf("%s (%s) imports %s (%s) on its own floor %d: put one of them lower", path, fromDir, rel, toDir, to)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d module imports read: the walk missed the tree", checked)
	}
}

// TestArchitectureNamesEveryPackage holds docs/architecture.md's package
// table to the tree: every folder with non-test Go files outside test/ is
// named in a row, and every name in a row is such a folder.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	_, table, _ := strings.Cut(string(doc), "## Packages")
	table, _, _ = strings.Cut(table, "\n## ")
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, part := range strings.Split(cells[1], ",") {
			if name := strings.Trim(strings.TrimSpace(part), "`"); name != "" && name != "package" && !strings.HasPrefix(name, "---") {
				named[name] = true
			}
		}
	}
	if len(named) < 20 {
		t.Fatalf("docs/architecture.md: only %d packages read from the table under \"## Packages\"", len(named))
	}
	found := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata" || n == "python" || path == "test") {
				return filepath.SkipDir
			}
			return nil
		}
		if dir := filepath.Dir(path); dir != "." && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			found[filepath.ToSlash(dir)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range found {
		if !named[dir] {
			t.Errorf("package %s is not in docs/architecture.md's package table", dir)
		}
	}
	for name := range named {
		if !found[name] {
			t.Errorf("docs/architecture.md's package table names %s, which is not a package folder", name)
		}
	}
}
