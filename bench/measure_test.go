package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// The runs of each test alternate between the targets, warm-up first; a
// target whose run fails takes no more runs while the others go on; each
// finished measurement's figures are over its timed runs only.
func TestRunAlternatingTakesEachTestsRunsInTurn(t *testing.T) {
	cfg := config{runs: 3, fresh: true, runTimeout: time.Minute}
	var order []string
	trialOf := func(target, test string, failAt int) *trial {
		m := &measurement{Target: target, Test: test, Bytes: 1000}
		return newTrial(cfg, m, hooks{}, func(ctx context.Context, copyIndex int) (int64, error) {
			order = append(order, fmt.Sprintf("%s/%s/%d", target, test, copyIndex))
			if copyIndex == failAt {
				return 0, errors.New("broken")
			}
			return 1000, nil
		})
	}
	trials := []*trial{
		trialOf("raw", "single", -1), trialOf("raw", "four", -1),
		trialOf("mnt", "single", 1), // fails at its second timed run (copy 1)
		trialOf("mnt", "four", -1),
	}
	runAlternating(context.Background(), cfg, trials)
	// Copy 3 is the warm-up's own (cfg.runs); timed runs read copies 0-2.
	want := []string{
		"raw/single/3", "mnt/single/3",
		"raw/single/0", "mnt/single/0",
		"raw/single/1", "mnt/single/1",
		"raw/single/2",
		"raw/four/3", "mnt/four/3",
		"raw/four/0", "mnt/four/0",
		"raw/four/1", "mnt/four/1",
		"raw/four/2", "mnt/four/2",
	}
	if !slices.Equal(order, want) {
		t.Fatalf("runs taken in the order\n%v\nwant\n%v", order, want)
	}
	for _, tr := range trials {
		m := tr.m
		failed := m.Target == "mnt" && m.Test == "single"
		switch {
		case failed && (m.Error == "" || m.MedianGBps != 0):
			t.Errorf("%s %s: error %q, median %v; want the failure kept and no figures", m.Target, m.Test, m.Error, m.MedianGBps)
		case !failed && (m.Error != "" || len(m.GBps) != 3 || m.MedianGBps <= 0):
			t.Errorf("%s %s: error %q, %d timed runs, median %v; want 3 runs and a median", m.Target, m.Test, m.Error, len(m.GBps), m.MedianGBps)
		}
	}
}
