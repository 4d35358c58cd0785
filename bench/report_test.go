package main

import (
	"math"
	"strings"
	"testing"
)

// With the runs alternating, each goal lists run i of its numerator over
// run i of its denominator, in run order, beside the ratio of the medians;
// targets whose run counts differ give no pairs.
func TestGoalsListEachRunsPairedRatio(t *testing.T) {
	set := objectSet{Large: object{Key: "large", Size: 1 << 30}, Medium: []object{{Key: "medium", Size: 256 << 20}}}
	r := &report{Setup: setup{RunOrder: runsAlternating, Runs: 3}, Objects: objectSets{set}, Measurements: []*measurement{
		{Target: "raw", Test: "single", GBps: []float64{3.0, 2.0, 2.5}},
		{Target: "s3gdsfs", Test: "single", GBps: []float64{2.1, 1.8, 2.0}},
		{Target: "raw", Test: "four", GBps: []float64{4.0, 4.0, 4.0}},
		{Target: "s3gdsfs", Test: "four", GBps: []float64{3.0, 3.6}}, // a run short
		{Target: "s3fs", Test: "single", GBps: []float64{0.5, 1.0, 0.8}},
		{Target: "raw", Test: "preads", GBps: []float64{5.0, 4.0, 5.0}},
		{Target: "s3gdsfs", Test: "preads", GBps: []float64{4.0, 4.0, 4.5}},
	}}
	for _, m := range r.Measurements {
		(&trial{m: m}).finish()
	}
	r.computeRatios()
	want := map[string][]float64{
		"s3gdsfs single / raw single stream":           {0.7, 0.9, 0.8},
		"s3gdsfs single / better peer single":          {4.2, 1.8, 2.5},
		"s3gdsfs 4 readers / raw 4 workers":            nil,
		"s3gdsfs 16 preading threads / raw 16 workers": {0.8, 1.0, 0.9},
	}
	for _, q := range r.Ratios {
		w, ok := want[q.Name]
		if !ok {
			t.Fatalf("unexpected goal %q", q.Name)
		}
		if len(q.PerRun) != len(w) {
			t.Fatalf("%s: per run %v, want %v", q.Name, q.PerRun, w)
		}
		for i := range w {
			if math.Abs(q.PerRun[i]-w[i]) > 1e-9 {
				t.Errorf("%s: per run %v, want %v", q.Name, q.PerRun, w)
			}
		}
	}
	if v := *r.Ratios[0].Value; math.Abs(v-2.0/2.5) > 1e-9 {
		t.Errorf("single / raw is %v, want the medians' ratio 0.8", v)
	}
	table := r.table()
	if !strings.Contains(table, "0.70 0.90 0.80") {
		t.Errorf("the table does not list the paired ratios in run order:\n%s", table)
	}

	// Runs taken one target after another are not paired.
	r.Setup.RunOrder = ""
	r.computeRatios()
	if r.Ratios[0].PerRun != nil {
		t.Errorf("paired ratios %v for runs that did not alternate", r.Ratios[0].PerRun)
	}
}
