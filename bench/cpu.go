package main

import "github.com/s3gdsfs/s3gdsfs/internal/testenv"

// cpuCount measures the CPU time used during one timed run by the bench
// itself and by the processes named in hooks.pids.
type cpuCount struct {
	pids  map[string]int
	start map[string]float64
}

func startCPUCount(pids func() map[string]int) cpuCount {
	c := cpuCount{}
	if pids != nil {
		c.pids = pids()
	}
	c.start = c.read()
	return c
}

// used returns the CPU seconds each role used since startCPUCount.
func (c cpuCount) used() map[string]float64 {
	used := map[string]float64{}
	for role, t := range c.read() {
		if t0, ok := c.start[role]; ok {
			used[role] = t - t0
		}
	}
	return used
}

// read returns user+system seconds by role; a process that cannot be read
// (it exited) is left out rather than counted as zero.
func (c cpuCount) read() map[string]float64 {
	out := map[string]float64{"reader": testenv.SelfCPUSeconds()}
	for role, pid := range c.pids {
		if t, err := testenv.ProcessCPUSeconds(pid); err == nil {
			out[role] = t
		}
	}
	return out
}
