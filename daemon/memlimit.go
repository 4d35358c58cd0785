package daemon

import (
	"os"
	"runtime/debug"
)

// goMemoryMargin is what the Go limit allows beyond block memory and
// staging in the Go heap, together with a thirty-second of block memory:
// the metadata cache, goroutine stacks and buffers of the S3 client and
// the FUSE server, which a mount's 64 readers and its lookups keep live.
const goMemoryMargin = 24 << 20

// GoMemoryLimit is the limit a mount's process should give Go's runtime
// (debug.SetMemoryLimit): block memory (--memory-limit), the GPU engine's
// staging where it lives in the Go heap (the host stand-in's; CUDA's
// pinned slots are the driver's, outside it), and a margin. Without one,
// Go's collector lets garbage grow to as much as the live heap, which is
// mostly block memory: with --memory-limit 256MiB, 64 readers and 7,500
// lookups of missing names took the mount to 564 MiB resident, and 293
// MiB with the limit (cmd/s3gdsfs, TestMountPeakMemoryStaysNearTheMemoryLimit).
// Live memory beyond the limit (a metadata cache of a million names) is
// not refused: the collector then runs more often, at most about half the
// CPU, and the heap grows past the limit.
func (d *Daemon) GoMemoryLimit() int64 {
	blocks := d.Core.Config().MemoryLimit
	var staging int64
	if d.GPU != nil && d.GPU.Backend().Name() == "host-standin" {
		if devs, err := d.GPU.Backend().Devices(); err == nil {
			size, slots := d.cfg.GPU.Staging.SlotSize, d.cfg.GPU.Staging.Slots
			staging = int64(len(devs)) * int64(size) * int64(slots)
		}
	}
	return blocks + blocks/32 + staging + goMemoryMargin
}

// LimitGoMemory sets Go's memory limit to GoMemoryLimit unless the user
// chose one (GOMEMLIMIT); it reports the limit in force and whether it set
// it. It is for a process that serves one mount (the command): the limit
// is the whole process's.
func (d *Daemon) LimitGoMemory() (limit int64, set bool) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), false
	}
	limit = d.GoMemoryLimit()
	debug.SetMemoryLimit(limit)
	return limit, true
}
