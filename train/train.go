// Package train defines the Trainer: batches of segment rows with per-token
// advantages in, optimizer steps and published weight versions out. The
// embedded model implements it in process; the remote client drives any
// implementation of the trainer protocol over HTTP.
package train

import (
	"context"
	"errors"
)

// ErrStateLost is in the chain of an error that means the trainer is not
// in the state the run log says it is: it restarted (a remote trainer came
// back at another step) or applied a step the caller did not expect. The
// controller answers it as it answers its own crash: it loads the newest
// durable checkpoint into the trainer and rewinds through the log.
var ErrStateLost = errors.New("trainer state lost")

// Row is one training row (one segment). All slices have len(Tokens)
// entries; entry i describes token i, which is predicted from Tokens[:i].
type Row struct {
	Tokens      []int32
	Mask        []uint8   // 1 where token i is trainable (a sampled token of a selected call)
	Advantages  []float32 // per-token advantage (0 where Mask is 0)
	OldLogprobs []float32 // behaviour-policy logprob of token i (0 where Mask is 0)
}

// Loss kinds.
const (
	LossPG  = "pg"  // clipped policy gradient on masked tokens
	LossSFT = "sft" // cross-entropy on masked tokens (supervised warm start)
)

// Batch is the input of one optimizer step.
type Batch struct {
	Loss string
	Rows []Row
	// Microbatches partitions Rows (indices) by token budget; nil means one
	// microbatch with every row. Gradients are summed over microbatches
	// before the single optimizer update.
	Microbatches [][]int
}

// StepStats describes one optimizer step.
type StepStats struct {
	Step     int64   // optimizer steps taken so far, this one included
	Version  int64   // weight version published by this step
	Loss     float64 // mean loss over trainable tokens
	GradNorm float64 // global gradient norm before clipping
	LR       float64
	ClipFrac float64 // fraction of trainable tokens whose ratio was clipped
	Tokens   int     // trainable tokens
	Diag     Diagnostics
}

// Diagnostics describe the policy on the step's trainable tokens as the
// trainer saw them before the update (the numbers GRPO runs are compared
// by). A trainer that cannot compute one leaves it 0.
type Diagnostics struct {
	Entropy      float64 `json:"entropy"`        // mean policy entropy (nats)
	KLRef        float64 `json:"kl_ref"`         // mean k3 KL to the reference (loss.kl_coef > 0)
	KLSampler    float64 `json:"kl_sampler"`     // mean k3 estimate of KL(sampler‖policy)
	ClipLowFrac  float64 `json:"clip_low_frac"`  // tokens clipped at 1−clip_low (A < 0)
	ClipHighFrac float64 `json:"clip_high_frac"` // tokens clipped at 1+clip_high (A > 0)
	// The trainer–sampler mismatch: mean |logπ_trainer − logπ_sampler| and
	// quantiles of the importance ratio exp(Δ).
	LogprobAbsDiff float64 `json:"logprob_abs_diff"`
	RatioP05       float64 `json:"ratio_p05"`
	RatioP50       float64 `json:"ratio_p50"`
	RatioP95       float64 `json:"ratio_p95"`
	RatioMax       float64 `json:"ratio_max"`
}

// State is where a trainer stands.
type State struct {
	Step    int64
	Version int64
}

// Trainer trains the policy. Implementations must be deterministic given
// the same sequence of calls when they say so.
type Trainer interface {
	TrainStep(ctx context.Context, b Batch) (StepStats, error)
	State(ctx context.Context) (State, error)
	// SaveCheckpoint writes weights, optimizer and RNG state into dir (which
	// exists and is empty); LoadCheckpoint restores exactly that state.
	SaveCheckpoint(ctx context.Context, dir string) error
	LoadCheckpoint(ctx context.Context, dir string) error
	// ExportWeights writes the current weights as safetensors (with an
	// HF-style config.json beside it) for a generation server to load.
	ExportWeights(ctx context.Context, path string) error
}
