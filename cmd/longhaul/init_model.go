package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/longhaul-rl/longhaul/model"
)

func newInitModelCmd() *cobra.Command {
	var o model.InitOptions
	var out string
	cmd := &cobra.Command{
		Use:   "init-model --family qwen3|qwen2|llama --layers L --hidden D --heads H --kv-heads K --tokenizer DIR --out DIR",
		Short: "write a randomly initialised Llama/Qwen model directory in the Hugging Face format",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("init-model: --out is required")
			}
			m, err := model.Init(o, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s, %d parameters\n", out, m.Config().Family, m.NumParams())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Family, "family", "qwen3", "model family: qwen3, qwen2 or llama")
	f.IntVar(&o.Layers, "layers", 2, "decoder layers")
	f.IntVar(&o.Hidden, "hidden", 128, "hidden size")
	f.IntVar(&o.Heads, "heads", 4, "attention heads")
	f.IntVar(&o.KVHeads, "kv-heads", 0, "key/value heads (0: = heads)")
	f.IntVar(&o.HeadDim, "head-dim", 0, "head dimension (0: hidden/heads)")
	f.IntVar(&o.Intermediate, "intermediate", 0, "MLP width (0: 3·hidden rounded up to 64)")
	f.IntVar(&o.Vocab, "vocab", 0, "vocabulary size (0: from the tokenizer)")
	f.IntVar(&o.MaxPos, "max-pos", 0, "max_position_embeddings (0: 4096)")
	f.Float64Var(&o.RopeTheta, "rope-theta", 0, "rope_theta (0: 1e6 qwen, 5e5 llama)")
	f.BoolVar(&o.Untied, "untied", false, "separate lm_head (llama is always untied)")
	f.Uint64Var(&o.Seed, "seed", 1, "initialisation seed")
	f.StringVar(&o.TokenizerDir, "tokenizer", "", "HF tokenizer directory to copy beside the weights")
	f.StringVar(&o.DType, "dtype", "F32", "weight dtype on disk: F32 or BF16")
	f.StringVar(&out, "out", "", "output directory")
	return cmd
}
