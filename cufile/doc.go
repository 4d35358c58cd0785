// Package cufile is the contract between the GPU read engine and the memory
// it writes: a Backend imports a caller's device allocation from its CUDA
// IPC handle and makes Stagers, which stage object bytes in pinned host
// slots and copy them into that allocation on copy streams, so that filling
// one slot overlaps copying the previous ones. It also holds what serves
// every backend alike: the ImportCache, which shares imports between
// requests and callers, and CopyFrom.
//
// The implementations are its sub-packages: cuda binds the CUDA driver,
// hoststandin stands in for it with host memory (for tests), and both stage
// through staging's slot ring.
package cufile
