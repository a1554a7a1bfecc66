// Package seedbench reproduces the measured tables of the stream-segment
// design (seed 002, "Stream segments") against the per-file engine
// (package fs/engine) on memory staging, behind the project's emulated links
// (link.ProfileDirectory and link.ProfileGeneral).
//
// It owns the reference workloads, not the engine: one function per table
// (Buys, Writer, Amp, Limits) returns rows, so that `go test -bench` in this
// package and `ckptfs bench` share one implementation, and each row type
// prints itself as markdown.
//
// # The workloads
//
//   - Buys ("What it buys"): Size bytes written in 1 MiB writes at a fixed
//     rate (a paced writer sleeps to hold it) or unpaced, then one flush;
//     Parted against Stream with targets 4 MiB .. 1 GiB, the dirty-data
//     limit raised out of the way. Each row carries the physical limit of
//     its flush (see Result.Limit).
//   - Writer: the time spent inside the writing calls, per GiB, with 16 MiB
//     writes on memory staging without a link, by value (WriteAt) and by
//     reference (WriteRef).
//   - Amp: write amplification when a working set is written over and over:
//     bytes uploaded (Put and UploadPart payloads, counted by
//     counting.Store) over bytes kept (the file's size).
//   - Limits: Buys' workload with the seed's default dirty-data limit
//     (8 MiB): nothing is sent ahead and the writer waits for partial
//     segments.
//
// # Measuring
//
// Durations are wall-clock times; the tables are meant to be read side by
// side from one run, on an otherwise idle machine. Nothing here asserts a
// duration: the tests of this package check that each table's rows are sane
// at a tiny size, never how fast they are.
package seedbench
