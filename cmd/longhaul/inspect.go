package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/runlog"
)

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect RUN_DIR [rollout ID]",
		Short: "summarise a run directory from its run log, or show one rollout",
		Long: `inspect reads a run directory's log (it never writes to it) and prints
event counts by kind, groups and rollouts by state, the step, and the last
snapshot and checkpoint. "inspect RUN_DIR rollout ID" shows one rollout's
attempts, calls (decoded tokens), env steps, compactions and failures.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1:
				return nil
			case len(args) == 3 && args[1] == "rollout":
				return nil
			}
			return fmt.Errorf("want RUN_DIR or RUN_DIR rollout ID, got %q", args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if len(args) == 3 {
				id, err := runlog.ParseRolloutID(args[2])
				if err != nil {
					return err
				}
				r, err := runlog.InspectRollout(cmd.Context(), args[0], id)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd, r)
				}
				return r.WriteText(out)
			}
			r, err := runlog.Inspect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd, r)
			}
			return r.WriteText(out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
