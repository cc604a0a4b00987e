// Package longhaul is the root of the module: RL post-training for
// long-horizon, multi-turn LLM agents whose context is compacted
// mid-rollout, built so that a run lasting days loses nothing to a crash.
//
// The folders follow the flow of one training step, top to bottom:
//
//	cmd/longhaul   the CLI
//	runner         assembles a run from its config (where a reader starts)
//	config         the run config: strict YAML, overrides, validation
//	controller     the planner that decides every next action, and the effect loop
//	data           prompts: datasets and the resumable per-epoch cursor
//	rollout        one rollout's agent loop: calls, environment steps, compaction
//	gen            calls: the Generator (embedded model, OpenAI-compatible servers)
//	env            environments: built-in tasks, HTTP environments, external agents
//	compaction     rewrites of a rollout's context, with lineage
//	segment        calls → training rows (segments) by exact token-prefix continuation
//	advantage      group statistics and credit rules
//	batch          token-budget packing of a step's rows
//	train          the Trainer (embedded, remote), checkpoints: a step makes a weights version
//	model          the transformer engine and its kernels (model/kern)
//	tokenizer      tokenizers and chat templates
//	runlog         the run log: every fact, before anything acts on it
//	store          where a run's files live: the storage seam
//	failure        the failure classes every boundary speaks
//	server         HTTP servers: OpenAI-compatible generation
//	metrics        metrics.jsonl, TensorBoard, Prometheus, plots
//	testkit        what tests share: fault proxy, process helpers, kill -9 proofs, an S3 server
//	deploy         Kubernetes and SLURM examples for runs past one machine
//
// No package imports one on a floor above it; layout_test.go holds the
// floors and fails on an import that runs back up.
package longhaul
