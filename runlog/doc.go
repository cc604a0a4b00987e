// Package runlog is a run's one source of truth: every fact the run learns
// is an event appended here before anything acts on it, and the run's
// state is a pure function of those events (Apply, no I/O inside).
//
// Where things are:
//
//   - events.go: the event schema (one struct per kind, what each field
//     means); kinds.go: the one table of kinds and their encodings;
//     apply.go and state.go: the pure state machine.
//   - log.go, commit.go, chunk.go, blob.go: the log on disk. Records are
//     CRC32C-framed in chunk files (.seg); token arrays are stored once,
//     content-addressed, in blob packs (.pack). Appends from many
//     goroutines share one fsync (group commit); Stage lets an in-process
//     effect go on while its record is written.
//   - recover.go, verify.go: a torn or corrupt tail is cut back to the last
//     whole record and reported; the verified watermark.
//   - snapshot.go: the state at a log offset, incremental, so a resume is
//     snapshot + replay of the tail.
//   - read.go, readonly.go, export.go, inspect.go: reading a run (also one
//     in use by another process) for inspect and the training-row views.
//
// The format and its guarantees are described in docs/runlog.md.
package runlog
