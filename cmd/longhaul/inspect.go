package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/runner"
	"github.com/longhaul-rl/longhaul/runview"
	"github.com/longhaul-rl/longhaul/store/bucket"
	"github.com/longhaul-rl/longhaul/store/mirror"
)

func newInspectCmd() *cobra.Command {
	var (
		asJSON     bool
		list       bool
		f          runview.Filter
		rows, toks bool
	)
	cmd := &cobra.Command{
		Use:   "inspect RUN_DIR [--rollouts [filters]] | inspect RUN_DIR rollout ID [--rows] [--tokens]  (RUN_DIR may be s3://BUCKET/PREFIX)",
		Short: "summarise a run directory from its run log, list its rollouts, or show one rollout",
		Long: `inspect reads a run directory's log (it never writes to it) and prints
event counts by kind, groups and rollouts by state, the step, and the last
snapshot and checkpoint.

"inspect RUN_DIR --rollouts" lists rollouts; --status, --compacted,
--failed and --step N filter the list (and imply --rollouts).

"inspect RUN_DIR rollout ID" shows one rollout's attempts, calls (decoded
tokens), env steps, compactions and failures; --rows adds its segments as
the training rows with their advantages, --tokens each row's tokens with
the sampler's logprob and the advantage.`,
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
			ctx := cmd.Context()
			dir := args[0]
			shown := dir // what the summary names: the URL, not the temporary copy
			if bucket.IsURL(dir) {
				local, err := pullRun(ctx, dir)
				if err != nil {
					return err
				}
				defer os.RemoveAll(local)
				dir = local
			}
			if len(args) == 3 {
				id, err := runlog.ParseRolloutID(args[2])
				if err != nil {
					return fmt.Errorf("rollout id %q: want <group>-<member> as `longhaul inspect %s --rollouts` lists them (e.g. g0000000000000000-1)", args[2], dir)
				}
				if err := runview.Check(ctx, dir, id); err != nil {
					return err
				}
				r, err := runlog.InspectRollout(ctx, dir, id)
				if err != nil {
					return err
				}
				tok, err := runner.RunTokenizer(dir, r.ConfigDigest)
				if err != nil {
					return err
				}
				r.Decode(tok)
				var tr *runview.Rows
				if rows || toks {
					if tr, err = runview.TrainingRows(ctx, dir, id, toks); err != nil {
						return err
					}
				}
				if asJSON {
					return writeJSON(cmd, struct {
						*runlog.RolloutReport
						Training *runview.Rows `json:"training,omitempty"`
					}{r, tr})
				}
				if err := r.WriteText(out); err != nil {
					return err
				}
				if tr != nil {
					writeRows(out, tr, tok)
				}
				return nil
			}
			if list || f != (runview.Filter{}) {
				rs, err := runview.List(ctx, dir, f)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd, rs)
				}
				return writeList(out, rs)
			}
			r, err := runlog.Inspect(ctx, dir)
			if err != nil {
				return err
			}
			r.Dir = shown
			if asJSON {
				return writeJSON(cmd, r)
			}
			return r.WriteText(out)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	fl.BoolVar(&list, "rollouts", false, "list rollouts")
	fl.StringVar(&f.Status, "status", "", "list rollouts in this state: pending, running, failed or sealed")
	fl.BoolVar(&f.Compacted, "compacted", false, "list rollouts with at least one compaction")
	fl.BoolVar(&f.Failed, "failed", false, "list rollouts that failed at least once")
	fl.Int64Var(&f.Step, "step", 0, "list rollouts trained in (or admitted for) step N")
	fl.BoolVar(&rows, "rows", false, "with rollout ID: its segments as training rows with advantages")
	fl.BoolVar(&toks, "tokens", false, "with rollout ID: the rows' tokens with logprobs and advantages (implies --rows)")
	return cmd
}

func writeList(w io.Writer, rs []runview.Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLLOUT\tPROMPT\tSTEP\tGROUP\tSTATUS\tREWARD\tSUCCESS\tCALLS\tSEGMENTS\tCOMPACTIONS\tFAILURES")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.3f\t%v\t%d\t%d\t%d\t%d\n", r.ID, r.PromptID, r.Step, r.Group, r.Status, r.Reward,
			r.Success, r.Calls, r.Segments, r.Compactions, r.Failures)
	}
	fmt.Fprintf(tw, "%d rollouts\n", len(rs))
	return tw.Flush()
}

func writeRows(w io.Writer, r *runview.Rows, tok runlog.Decoder) {
	fmt.Fprintf(w, "\ntraining rows: reward %g, group mean %.4f, std %.4f -> advantage %.4f\n", r.Reward, r.GroupMean, r.GroupStd, r.Advantage)
	for _, s := range r.Segments {
		masked := ""
		if s.Masked {
			masked = ", masked"
		}
		fmt.Fprintf(w, "  segment %d (%s, calls %d-%d%s): %d tokens, %d trainable, advantage %.4f\n",
			s.Index, s.Start, s.FirstCall, s.LastCall, masked, s.Tokens, s.Trainable, s.Advantage)
		if len(s.PerToken) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    POS\tTOKEN\tTEXT\tTRAIN\tLOGPROB\tADVANTAGE")
		for _, t := range s.PerToken {
			if t.Trainable {
				fmt.Fprintf(tw, "    %d\t%d\t%q\tyes\t%.4f\t%.4f\n", t.Pos, t.Token, tok.Decode([]int32{t.Token}), t.Logprob, t.Advantage)
			} else {
				fmt.Fprintf(tw, "    %d\t%d\t%q\t-\t\t\n", t.Pos, t.Token, tok.Decode([]int32{t.Token}))
			}
		}
		tw.Flush()
	}
}

func writeJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// pullRun copies the run kept at u (s3://BUCKET/PREFIX) into a new
// temporary directory, every object checked against its digest, without
// taking the run's lease: inspect reads it there.
func pullRun(ctx context.Context, u string) (string, error) {
	name, prefix, err := bucket.ParseURL(u)
	if err != nil {
		return "", err
	}
	c, err := bucket.New(ctx, name, bucket.Options{})
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "longhaul-inspect-")
	if err != nil {
		return "", err
	}
	if _, err := mirror.Pull(ctx, c, prefix, dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}
