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
}

func (m *measurement) ok() bool { return m.Error == "" && len(m.GBps) > 0 }

// readFunc reads the test's bytes once and returns how many it read.
type readFunc func(ctx context.Context) (int64, error)

// hooks let a target prepare each run (drop caches, remount) and abort a
// run that hangs (kill the mount so blocked reads return).
type hooks struct {
	beforeRun func(ctx context.Context) error
	onTimeout func()
}

// measure times read cfg.runs times; each run must read exactly bytes.
func measure(ctx context.Context, cfg config, m *measurement, h hooks, read readFunc) {
	for i := 1; i <= cfg.runs; i++ {
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
		start := time.Now()
		n, err := read(runCtx)
		elapsed := time.Since(start)
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
		gbps := float64(n) / elapsed.Seconds() / 1e9
		m.Seconds = append(m.Seconds, elapsed.Seconds())
		m.GBps = append(m.GBps, gbps)
		progress("%-8s %-7s run %d/%d: %.3f GB/s (%.2fs)", m.Target, m.Test, i, cfg.runs, gbps, elapsed.Seconds())
	}
	sorted := slices.Sorted(slices.Values(m.GBps))
	m.MinGBps, m.MaxGBps = sorted[0], sorted[len(sorted)-1]
	m.MedianGBps = median(sorted)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
