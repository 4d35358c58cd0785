package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
)

// --watch shows each byte count's rate since the print before: none on the
// first print, then the bytes between the two prints over the time between.
func TestStatsWatchShowsRates(t *testing.T) {
	raw := func(posix, s3 float64) map[string]json.RawMessage {
		st, _ := json.Marshal(map[string]any{
			"posix_read_bytes_total":  posix,
			"posix_reads_total":       1,
			"s3_received_bytes_total": s3,
			"gpu_read_bytes_total":    map[string]float64{"http": 0, "rdma": 0},
		})
		return map[string]json.RawMessage{
			abi.XattrCaps:  json.RawMessage(`{"cuda_available":false,"rdma":{"minter":"none","fabric":"none"}}`),
			abi.XattrStats: st,
		}
	}
	var last *snapshot
	var first bytes.Buffer
	if err := statsTable(&first, "/mnt", raw(0, 0), &last); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(first.String(), "GB/s") {
		t.Fatalf("the first print has rates:\n%s", first.String())
	}
	last.at = time.Now().Add(-2 * time.Second) // as if printed two seconds ago
	var second bytes.Buffer
	if err := statsTable(&second, "/mnt", raw(4e9, 6e9), &last); err != nil {
		t.Fatal(err)
	}
	out := second.String()
	for _, want := range []string{`POSIX reads +3\.7 GiB in 1 reads, (1\.9\d|2\.0\d) GB/s`, `from S3 +5\.6 GiB in 0 requests, (2\.9\d|3\.0\d) GB/s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the second print does not match %q:\n%s", want, out)
		}
	}
}
