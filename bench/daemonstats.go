package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
)

// daemonCounters are the s3gdsfs counters a run's figures are read beside:
// how its FUSE requests were waited for (--fuse-poll) and which path its
// bytes took. Keys are the stats snapshot's names, "name/label" for one
// label value.
var daemonCounters = []struct{ key, label string }{
	{"fuse_requests_total/polled", "requests polled"},
	{"fuse_requests_total/slept", "slept"},
	{"fuse_requests_total/blocked", "blocked"},
	{"fuse_wakeups_beside_pollers_total", "woken beside pollers"},
	{"fuse_interrupts_total/requeued", "interrupts requeued"},
	{"splice_bytes_total", "spliced GB"},
	{"splice_small_buffer_bytes_total", "copied GB"},
	{"splice_socket_waits_total", "socket waits"},
	{"splice_ahead_bytes_total", "spliced ahead GB"},
	// Not listed as they are: daemonLines gives the mean reply time.
	{"fuse_read_replies_total", ""},
	{"fuse_read_reply_seconds_total", ""},
}

// s3gdsfsCounters reads daemonCounters from the mount's stats extended
// attribute (the daemon's own snapshot of its metrics).
func s3gdsfsCounters(mountpoint string) (map[string]float64, error) {
	buf := make([]byte, 256<<10)
	n, err := syscall.Getxattr(mountpoint, "user.s3gdsfs.stats", buf)
	if err != nil {
		return nil, fmt.Errorf("stats of %s: %w", mountpoint, err)
	}
	var stats map[string]any
	if err := json.Unmarshal(buf[:n], &stats); err != nil {
		return nil, fmt.Errorf("stats of %s: %w", mountpoint, err)
	}
	out := map[string]float64{}
	for _, c := range daemonCounters {
		name, label, labelled := strings.Cut(c.key, "/")
		switch v := stats[name].(type) {
		case float64:
			if !labelled {
				out[c.key] = v
			}
		case map[string]any:
			if f, ok := v[label].(float64); ok && labelled {
				out[c.key] = f
			}
		}
	}
	return out, nil
}

// daemonLines lists, for the tests that have them, the daemon's counters
// per timed run.
func daemonLines(b *bytes.Buffer, ms []*measurement) {
	header := false
	for _, x := range ms {
		if !x.ok() || len(x.DaemonPerRun) == 0 {
			continue
		}
		if !header {
			b.WriteString("\nthe daemon's counters, per timed run:\n")
			header = true
		}
		var parts []string
		for _, c := range daemonCounters {
			v, ok := x.DaemonPerRun[c.key]
			if !ok || c.label == "" {
				continue
			}
			if strings.HasSuffix(c.label, "GB") {
				parts = append(parts, fmt.Sprintf("%s %.2f", c.label, v/1e9))
			} else {
				parts = append(parts, fmt.Sprintf("%s %.0f", c.label, v))
			}
		}
		parts = append(parts, replyTimes(x)...)
		fmt.Fprintf(b, "  %-8s %-6s %s\n", x.Target, x.Test, strings.Join(parts, ", "))
	}
}

// replyTimes says how long the daemon took per READ request, from its read
// off /dev/fuse to its reply's write, and for a single reader, which waits
// on each reply, how long the rest of each request's time was: the
// kernel's hand-offs and the reader's wake-up and next call.
func replyTimes(x *measurement) []string {
	n, secs := x.DaemonPerRun["fuse_read_replies_total"], x.DaemonPerRun["fuse_read_reply_seconds_total"]
	if n <= 0 {
		return nil
	}
	reply := secs / n * 1e6
	out := []string{fmt.Sprintf("reply %.0f us/read", reply)}
	if x.Test == "single" && len(x.Seconds) > 0 {
		wall := 0.0
		for _, s := range x.Seconds {
			wall += s
		}
		wall /= float64(len(x.Seconds))
		// A reply's write can return after its reader has run (on a busy
		// machine the woken reader takes the daemon thread's CPU); then
		// the difference says nothing.
		if between := wall/n*1e6 - reply; between > 0 {
			out = append(out, fmt.Sprintf("between replies %.0f us", between))
		}
	}
	return out
}
