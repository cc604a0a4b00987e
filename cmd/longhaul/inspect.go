package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect RUN_DIR",
		Short: "summarise a run directory (placeholder until the run log lands)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("inspect: not built yet") },
	}
}
