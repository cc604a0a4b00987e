//go:build longhaul_deps

// Package deps pins the project's third-party modules while packages that use
// them are being written; it is never built (the tag is never set).
package deps

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/nlpodyssey/safetensors"
	_ "github.com/spf13/cobra"
	_ "github.com/vbauerster/mpb/v8"
	_ "go.yaml.in/yaml/v3"
	_ "gonum.org/v1/plot"
	_ "pgregory.net/rapid"
)
