package metrics

import (
	"os"
	"strings"
	"testing"
)

// Every series the daemon registers is documented in docs/metrics.md.
func TestEverySeriesIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	s := New(func() float64 { return 0 }, func() float64 { return 0 })
	// Labelled series appear in Gather only once observed; touch them all.
	s.S3Requests.WithLabelValues("x", "y")
	s.S3Seconds.WithLabelValues("x")
	s.PosixReadErrors.WithLabelValues("EIO")
	s.MetaCacheHits.WithLabelValues("positive")
	s.SkippedKeys.WithLabelValues("too_long")
	s.GPUReadSeconds.WithLabelValues("http")
	s.GPUReadErrors.WithLabelValues("EIO")
	families, err := s.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// The GPU engine registers these itself.
	names := map[string]bool{"s3gdsfs_gpu_ops_in_flight": true, "s3gdsfs_gpu_ops_waiting": true,
		"s3gdsfs_gpu_staging_slots_busy": true, "s3gdsfs_gpu_staging_pinned_bytes": true}
	for _, f := range families {
		names[f.GetName()] = true
	}
	n := 0
	for name := range names {
		if !strings.HasPrefix(name, "s3gdsfs_") {
			continue
		}
		n++
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is registered but not in docs/metrics.md", name)
		}
	}
	if n < 25 {
		t.Fatalf("only %d s3gdsfs series found; the registry lost some", n)
	}
}
