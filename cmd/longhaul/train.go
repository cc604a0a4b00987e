package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newTrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "train",
		Short: "run GRPO training (placeholder until the controller lands)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("train: not built yet") },
	}
}
