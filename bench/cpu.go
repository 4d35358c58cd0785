package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

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
	out := map[string]float64{}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out["reader"] = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
	}
	for role, pid := range c.pids {
		if t, err := processCPUSeconds(pid); err == nil {
			out[role] = t
		}
	}
	return out
}

func tvSeconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// processCPUSeconds reads utime+stime of pid from /proc/PID/stat.
func processCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return (utime + stime) / clockTicks, nil
}
