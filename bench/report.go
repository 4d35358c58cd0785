package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

type report struct {
	Machine      machineInfo    `json:"machine"`
	Setup        setup          `json:"setup"`
	Objects      objectSets     `json:"objects"` // one set per timed run with -fresh
	Targets      []targetStatus `json:"targets"`
	Measurements []*measurement `json:"measurements"`
	Ratios       []ratio        `json:"ratios"`
}

type setup struct {
	Runs      int     `json:"runs"`
	SizeScale float64 `json:"size_scale"`
	Remount   bool    `json:"remount_each_run"`
	Fresh     bool    `json:"fresh_objects_each_run"`
	Server    string  `json:"server"`
	PosixDir  string  `json:"posix_dir"`
	PageCache string  `json:"page_cache"`
	ReadSize  int     `json:"read_size"`
	GBIs      string  `json:"gb_is"`
	// RunOrder says how the targets' runs were taken: "alternating" (run
	// i of every target of a test before run i+1 of any).
	RunOrder string `json:"run_order"`
}

type targetStatus struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // measured, skipped, failed
	Reason  string `json:"reason,omitempty"`
	Version string `json:"version,omitempty"`
}

// ratio is one goal of the project, checked against this run's medians.
type ratio struct {
	Name        string   `json:"name"`
	Numerator   string   `json:"numerator"`
	Denominator string   `json:"denominator"`
	Value       *float64 `json:"value"`
	Target      float64  `json:"target"`
	Holds       *bool    `json:"holds"` // null when a figure is missing
	Note        string   `json:"note,omitempty"`
	// PerRun is run i of the numerator over run i of the denominator, for
	// every i: with the runs alternating between the targets, the two were
	// taken seconds apart, so the spread of these is the goal's own, apart
	// from the machine's drift over the benchmark.
	PerRun []float64 `json:"per_run,omitempty"`
}

func (r *report) find(target, test string) *measurement {
	for _, m := range r.Measurements {
		if m.Target == target && m.Test == test {
			return m
		}
	}
	return nil
}

func (r *report) failed() bool {
	for _, m := range r.Measurements {
		if m.Error != "" {
			return true
		}
	}
	return false
}

func (r *report) computeRatios() {
	r.Ratios = []ratio{
		r.ratioOf("s3gdsfs single / raw single stream", "s3gdsfs single", r.find("s3gdsfs", "single"), "raw single", r.find("raw", "single"), 0.8),
		r.ratioOf("s3gdsfs single / better peer single", "s3gdsfs single", r.find("s3gdsfs", "single"), "rclone or s3fs single", r.betterPeerSingle(), 2.5),
		r.ratioOf("s3gdsfs 4 readers / raw 4 workers", "s3gdsfs four", r.find("s3gdsfs", "four"), "raw four", r.find("raw", "four"), 0.8),
		r.ratioOf("s3gdsfs 16 preading threads / raw 16 workers", "s3gdsfs preads", r.find("s3gdsfs", "preads"), "raw preads", r.find("raw", "preads"), 0.8),
	}
}

// betterPeerSingle is the faster of rclone and s3fs for one reader.
func (r *report) betterPeerSingle() *measurement {
	var best *measurement
	for _, peer := range []string{"rclone", "s3fs"} {
		if m := r.find(peer, "single"); m != nil && m.ok() && (best == nil || m.MedianGBps > best.MedianGBps) {
			best = m
		}
	}
	return best
}

func (r *report) ratioOf(name, numLabel string, num *measurement, denLabel string, den *measurement, target float64) ratio {
	q := ratio{Name: name, Numerator: numLabel, Denominator: denLabel, Target: target}
	if den != nil {
		q.Denominator = den.Target + " " + den.Test // names the better peer
	}
	switch {
	case num == nil || !num.ok():
		q.Note = "numerator not measured"
	case den == nil || !den.ok():
		q.Note = "denominator not measured"
	case den.MedianGBps == 0:
		q.Note = "denominator is zero"
	default:
		v := num.MedianGBps / den.MedianGBps
		holds := v >= target
		q.Value, q.Holds = &v, &holds
		if r.Setup.RunOrder == runsAlternating {
			q.PerRun = pairedRatios(num.GBps, den.GBps)
		}
	}
	return q
}

// pairedRatios is num[i]/den[i] for every run both have (none when the
// run counts differ: a target that failed part way).
func pairedRatios(num, den []float64) []float64 {
	if len(num) != len(den) {
		return nil
	}
	out := make([]float64, 0, len(num))
	for i := range num {
		if den[i] <= 0 {
			return nil
		}
		out = append(out, num[i]/den[i])
	}
	return out
}

// perRunColumn lists the paired ratios with two places, "-" for none.
func perRunColumn(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "posix.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	table := r.table()
	os.Stdout.WriteString(table)
	if err := os.WriteFile(filepath.Join(dir, "posix.txt"), []byte(table), 0o644); err != nil {
		return err
	}
	progress("wrote %s and %s", filepath.Join(dir, "posix.json"), filepath.Join(dir, "posix.txt"))
	return nil
}

func (r *report) table() string {
	var b bytes.Buffer
	m := r.Machine
	fmt.Fprintf(&b, "s3gdsfs POSIX read benchmark, %s\n", m.Date)
	fmt.Fprintf(&b, "machine:    %d cores, %s, %d GiB, kernel %s, %s, %s\n", m.Cores, m.CPU, m.MemoryGiB, m.Kernel, m.OS, m.GoVersion)
	fmt.Fprintf(&b, "server:     %s\n", r.Setup.Server)
	fmt.Fprintf(&b, "posix dir:  %s\n", r.Setup.PosixDir)
	fmt.Fprintf(&b, "page cache: %s\n", r.Setup.PageCache)
	switch {
	case r.Setup.Remount:
		fmt.Fprintf(&b, "mounts:     remounted before every timed run (a cold daemon each time)\n")
	case r.Setup.Fresh:
		fmt.Fprintf(&b, "mounts:     one mount per target, kept across runs; one untimed warm-up run first (a warm daemon)\n")
	default:
		fmt.Fprintf(&b, "mounts:     one mount per target (a daemon's own cache may serve repeated runs; -remount avoids it)\n")
	}
	if r.Setup.RunOrder == runsAlternating {
		fmt.Fprintf(&b, "order:      each test's runs alternate between the targets (run 1 of raw, s3gdsfs and the peers, then run 2, ...)\n")
	}
	first := r.Objects.forRun(0)
	copies := "one copy read by every run"
	if r.Setup.Fresh {
		copies = "each run reads its own copy, never read before"
	}
	fmt.Fprintf(&b, "objects:    %s x1, %s x%d; %d timed runs each, %s; GB/s with GB = 1e9 bytes\n\n",
		humanBytes(first.Large.Size), humanBytes(first.Medium[0].Size), len(first.Medium), r.Setup.Runs, copies)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\ttest\tmedian GB/s\tmin\tmax\tverified\tCPU s/GB reader+fs+server\tdescription")
	for _, x := range r.Measurements {
		if x.ok() {
			fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%.3f\t%v\t%s\t%s\n", x.Target, x.Test, x.MedianGBps, x.MinGBps, x.MaxGBps, x.Verified, cpuColumn(x.CPUPerGB), x.Description)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\tFAILED: %s\n", x.Target, x.Test, oneLine(x.Error))
		}
	}
	tw.Flush()
	readerSpread(&b, r.Measurements)
	daemonLines(&b, r.Measurements)

	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\tratio\ttarget\tholds\trun by run")
	for _, q := range r.Ratios {
		value, holds := "n/a", "n/a ("+q.Note+")"
		if q.Value != nil {
			// Three places: 0.798 reads "0.80" in two, beside a NO.
			value = fmt.Sprintf("%.3f", *q.Value)
			holds = map[bool]string{true: "yes", false: "NO"}[*q.Holds]
		}
		if q.Name == "s3gdsfs single / better peer single" && q.Value != nil {
			holds += " (vs " + q.Denominator + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t>= %.1f\t%s\t%s\n", q.Name, value, q.Target, holds, perRunColumn(q.PerRun))
	}
	tw.Flush()

	b.WriteString("\n")
	for _, t := range r.Targets {
		line := fmt.Sprintf("%-8s %s", t.Name, t.Status)
		if t.Version != "" {
			line += "  [" + t.Version + "]"
		}
		if t.Reason != "" {
			line += ": " + oneLine(t.Reason)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// oneLine keeps table rows readable; the JSON has the full text.
func oneLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// cpuColumn writes CPU seconds per GB as reader+fs+server=total; a role not
// measured (no daemon for raw reads) is "-".
func cpuColumn(c map[string]float64) string {
	if len(c) == 0 {
		return "-"
	}
	part := func(role string) string {
		if v, ok := c[role]; ok {
			return fmt.Sprintf("%.2f", v)
		}
		return "-"
	}
	total := 0.0
	for _, v := range c {
		total += v
	}
	return fmt.Sprintf("%s+%s+%s=%.2f", part("reader"), part("fs"), part("server"), total)
}

// readerSpread lists, for tests of readers at once, each reader's GB/s in
// every run, slowest first: the run's rate is set by the slowest.
func readerSpread(b *bytes.Buffer, ms []*measurement) {
	header := false
	for _, x := range ms {
		if !x.ok() || len(x.ReaderGBps) == 0 {
			continue
		}
		if !header {
			b.WriteString("\neach reader's GB/s per run, slowest first (a run's rate is set by its slowest):\n")
			header = true
		}
		var runs []string
		for _, rates := range x.ReaderGBps {
			sorted := slices.Sorted(slices.Values(rates))
			each := make([]string, len(sorted))
			for i, v := range sorted {
				each[i] = fmt.Sprintf("%.2f", v)
			}
			runs = append(runs, strings.Join(each, " "))
		}
		fmt.Fprintf(b, "  %-8s %-6s %s\n", x.Target, x.Test, strings.Join(runs, " | "))
	}
}
