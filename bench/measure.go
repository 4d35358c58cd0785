package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// measurement is one benchmark figure: the same read repeated runs times.
type measurement struct {
	Target      string    `json:"target"` // raw, s3gdsfs, rclone, s3fs
	Test        string    `json:"test"`   // single, ranges, four
	Description string    `json:"description"`
	Bytes       int64     `json:"bytes_per_run"`
	Seconds     []float64 `json:"seconds"`
	GBps        []float64 `json:"gbps"`
	MedianGBps  float64   `json:"median_gbps"`
	MinGBps     float64   `json:"min_gbps"`
	MaxGBps     float64   `json:"max_gbps"`
	// Verified: every timed read was spot-checked against the generator and
	// a separate untimed pass matched each object's sha256.
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`
	// CPUPerGB is CPU seconds per GB read, over all runs, by role: the
	// reading process (the bench itself: the raw client, or the reader of a
	// mount), the filesystem's daemon, and the S3 server. On a machine that
	// runs all three, their sum is what bounds throughput.
	CPUPerGB map[string]float64 `json:"cpu_seconds_per_gb,omitempty"`
	// ReaderGBps is, for tests of readers at once, each reader's own rate
	// in every timed run: the run's rate is the bytes over the time until
	// the slowest finished, and the spread says which reader held it back.
	ReaderGBps [][]float64 `json:"reader_gbps,omitempty"`
	// DaemonPerRun is, for a daemon that reports them (s3gdsfs), its
	// counters' growth per timed run (daemonCounters): how its requests
	// were waited for and which path the bytes took.
	DaemonPerRun map[string]float64 `json:"daemon_counters_per_run,omitempty"`
	// readers collects the rates of the run in progress (eachTimed).
	readers []float64
}

func (m *measurement) ok() bool { return m.Error == "" && len(m.GBps) > 0 }

// readFunc reads the test's bytes once and returns how many it read.
// run counts timed runs from 0.
type readFunc func(ctx context.Context, run int) (int64, error)

// hooks let a target prepare each run (drop caches, remount) and abort a
// run that hangs (kill the mount so blocked reads return).
type hooks struct {
	beforeRun func(ctx context.Context) error
	onTimeout func()
	// pids names the processes whose CPU time a run is charged with, by
	// role ("fs", "server"); the bench's own is always counted as "reader".
	pids func() map[string]int
	// counters, if set, reads the daemon's counters (s3gdsfsCounters);
	// their growth over the timed runs goes into DaemonPerRun.
	counters func() (map[string]float64, error)
}

// trial is one measurement in progress: its runs are taken one at a time
// (step), so that the runs of the targets of one test can alternate and a
// drift of the machine shows in every target alike, not in the one that
// happened to run last; finish sums them up.
type trial struct {
	cfg       config
	m         *measurement
	h         hooks
	read      readFunc
	cpuTotals map[string]float64
}

func newTrial(cfg config, m *measurement, h hooks, read readFunc) *trial {
	return &trial{cfg: cfg, m: m, h: h, read: read, cpuTotals: map[string]float64{}}
}

// firstRun is the index of the first run: 0 is the untimed warm-up (with
// cfg.warmUp), reading its own copy of the objects (the last one), so the
// timed runs 1..cfg.runs see a daemon whose buffers and connections
// already exist.
func (c config) firstRun() int {
	if c.warmUp() {
		return 0
	}
	return 1
}

// step takes run i (0: the warm-up) unless the measurement has failed; a
// failure ends it (m.Error) and later steps do nothing.
func (t *trial) step(ctx context.Context, i int) {
	cfg, m, h := t.cfg, t.m, t.h
	if m.Error != "" {
		return
	}
	warm := i == 0
	if err := ctx.Err(); err != nil {
		m.Error = err.Error()
		return
	}
	if h.beforeRun != nil {
		if err := h.beforeRun(ctx); err != nil {
			m.Error = fmt.Sprintf("run %d: preparing: %v", i, err)
			return
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	var timedOut atomic.Bool
	abortDone := make(chan struct{})
	watchdog := time.AfterFunc(cfg.runTimeout, func() {
		defer close(abortDone)
		timedOut.Store(true)
		progress("%s %s run %d exceeded %v: aborting", m.Target, m.Test, i, cfg.runTimeout)
		cancel()
		if h.onTimeout != nil {
			h.onTimeout()
		}
	})
	var before map[string]float64
	if h.counters != nil && !warm {
		var err error
		if before, err = h.counters(); err != nil {
			progress("%s %s run %d: daemon counters: %v", m.Target, m.Test, i, err)
		}
	}
	cpu := startCPUCount(h.pids)
	start := time.Now()
	copyIndex := i - 1
	if warm {
		copyIndex = cfg.runs
	}
	m.readers = nil
	n, err := t.read(runCtx, copyIndex)
	elapsed := time.Since(start)
	cpuUsed := cpu.used()
	if !watchdog.Stop() {
		<-abortDone // let the abort finish before the next run starts
	}
	cancel()
	if err == nil && n != m.Bytes {
		err = fmt.Errorf("read %d bytes, want %d", n, m.Bytes)
	}
	if err != nil && timedOut.Load() {
		err = fmt.Errorf("aborted after -run-timeout %v (%v)", cfg.runTimeout, err)
	}
	if err != nil {
		m.Error = fmt.Sprintf("run %d: %v", i, err)
		return
	}
	if warm {
		progress("%-8s %-7s warm-up run: %.3f GB/s (%.2fs, not counted)", m.Target, m.Test, float64(n)/elapsed.Seconds()/1e9, elapsed.Seconds())
		return
	}
	gbps := float64(n) / elapsed.Seconds() / 1e9
	if m.readers != nil {
		m.ReaderGBps = append(m.ReaderGBps, m.readers)
	}
	m.Seconds = append(m.Seconds, elapsed.Seconds())
	m.GBps = append(m.GBps, gbps)
	for role, secs := range cpuUsed {
		t.cpuTotals[role] += secs
	}
	if before != nil {
		after, err := h.counters()
		if err != nil {
			progress("%s %s run %d: daemon counters: %v", m.Target, m.Test, i, err)
		}
		for k, v := range after {
			if m.DaemonPerRun == nil {
				m.DaemonPerRun = map[string]float64{}
			}
			m.DaemonPerRun[k] += (v - before[k]) / float64(cfg.runs)
		}
	}
	progress("%-8s %-7s run %d/%d: %.3f GB/s (%.2fs)", m.Target, m.Test, i, cfg.runs, gbps, elapsed.Seconds())
}

// finish sets the figures over the timed runs taken.
func (t *trial) finish() {
	m := t.m
	if !m.ok() {
		return
	}
	sorted := slices.Sorted(slices.Values(m.GBps))
	m.MinGBps, m.MaxGBps = sorted[0], sorted[len(sorted)-1]
	m.MedianGBps = median(sorted)
	gb := float64(m.Bytes) * float64(len(m.GBps)) / 1e9
	m.CPUPerGB = map[string]float64{}
	for role, secs := range t.cpuTotals {
		m.CPUPerGB[role] = secs / gb
	}
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
