// Package examples ships the example run configurations; the default one
// is embedded so that `longhaul train` runs without any file.
package examples

import _ "embed"

// Default is examples/ledger.yaml: the configuration `longhaul train` uses
// without --config. Treat it as read-only.
//
//go:embed ledger.yaml
var Default []byte

// DefaultName names Default in error messages.
const DefaultName = "examples/ledger.yaml"
