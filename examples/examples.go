// Package examples ships the example run configurations; the default one
// is embedded so that `longhaul train` runs without any file, and so is
// the summary study's (`longhaul bench summaries`).
package examples

import _ "embed"

// Default is examples/ledger.yaml: the configuration `longhaul train` uses
// without --config. Treat it as read-only.
//
//go:embed ledger.yaml
var Default []byte

// DefaultName names Default in error messages.
const DefaultName = "examples/ledger.yaml"

// Recall is examples/recall.yaml, the base config of `longhaul bench
// summaries`. Treat it as read-only.
//
//go:embed recall.yaml
var Recall []byte
