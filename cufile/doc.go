// Package cufile is the daemon's runtime binding to the CUDA driver: it
// imports a caller's device allocation from its CUDA IPC handle, stages
// object bytes in pinned host slots and copies them into that allocation on
// copy streams, so that filling one slot overlaps copying the previous ones.
//
// The driver (libcuda.so.1) is opened with dlopen through purego rather than
// linked with cgo, so the daemon builds with CGO_ENABLED=0 and starts on hosts
// without a GPU; CUDA itself (cuInit, the primary contexts) is initialised
// only when the first GPU request arrives, since that is a pause a mount
// that never serves a GPU read should not make, and costs a context's worth
// of device memory per GPU (docs/benchmarks.md, "What was not measured").
//
// Threading rule: CUDA's current context belongs to an OS thread, not to a
// goroutine. Every batch of driver calls for a device runs on a goroutine
// locked to its thread with that device's primary context made current
// first; callers of this package need not care which goroutine they are on.
//
// A host-memory stand-in (NewHostStandin) implements the same interfaces with
// shared-memory files in place of device allocations, so the whole GPU read
// path can run on machines without a GPU. It is for tests only.
package cufile
