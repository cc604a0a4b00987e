// Command gendoc writes docs/config.md from the config package's struct
// tags and defaults: go run ./config/gendoc (from the repo root).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/longhaul-rl/longhaul/config"
)

func main() {
	out := flag.String("o", "docs/config.md", "file to write")
	flag.Parse()
	if err := os.WriteFile(*out, config.Markdown(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}
