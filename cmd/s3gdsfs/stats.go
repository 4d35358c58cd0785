package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
)

const statsUsage = `usage: s3gdsfs stats [--json] [--watch SECONDS] PATH

What a mount says about itself (PATH its mount point or a directory on it),
or about one file on it: bytes read by path (POSIX, spliced, GPU over HTTP or
RDMA), bytes written by path and uploads where the mount has written, errors
by kind, GPU reads declined by reason, memory in use against its limit. --json prints the extended attributes user.s3gdsfs.caps and
user.s3gdsfs.stats as they are (docs/ioctl.md); --watch prints it again every
SECONDS until interrupted, each byte count with its GB/s since the print before.
`

// runStats prints what a mount says about itself: its capabilities and
// counters (the mount root), or a file's version and counters.
func runStats(args []string) error {
	fset := flag.NewFlagSet("stats", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	asJSON := fset.Bool("json", false, "")
	watch := fset.Float64("watch", 0, "")
	// Flags may come after the path too.
	var paths []string
	for rest := args; ; {
		if err := fset.Parse(rest); err != nil {
			if err == flag.ErrHelp {
				fmt.Fprint(os.Stdout, statsUsage)
				return err
			}
			return cli.UsageError{Err: fmt.Errorf("%v\n%s", err, statsUsage)}
		}
		if fset.NArg() == 0 {
			break
		}
		paths = append(paths, fset.Arg(0))
		rest = fset.Args()[1:]
	}
	if len(paths) != 1 {
		return cli.Usagef("want one PATH (a mount point or a file under it), got %d\n%s", len(paths), statsUsage)
	}
	if *watch < 0 {
		return cli.Usagef("--watch %v: want seconds above 0", *watch)
	}
	path := paths[0]
	clear := false // the screen, between two prints to a terminal
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		clear = *watch > 0 && !*asJSON
	}
	var last *snapshot // the print before, for the rates of --watch
	for {
		raw, err := readStats(path)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if *asJSON {
			b, err := json.MarshalIndent(raw, "", "  ")
			if err != nil {
				return err
			}
			out.Write(append(b, '\n'))
		} else {
			if *watch > 0 {
				if clear {
					out.WriteString("\033[H\033[2J")
				}
				fmt.Fprintf(&out, "%s, every %gs (Ctrl-C to stop)\n\n", time.Now().Format("15:04:05"), *watch)
			}
			if err := statsTable(&out, path, raw, &last); err != nil {
				return err
			}
		}
		if _, err := os.Stdout.Write(out.Bytes()); err != nil {
			return err
		}
		if *watch == 0 {
			return nil
		}
		time.Sleep(time.Duration(*watch * float64(time.Second)))
	}
}

func readStats(path string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, name := range []string{abi.XattrCaps, abi.XattrStats} {
		v, err := getxattr(path, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w (is it on an s3gdsfs mount? s3gdsfs mount --help)", path, name, err)
		}
		out[name] = v
	}
	return out, nil
}

// snapshot is one print's counters and when they were read.
type snapshot struct {
	st map[string]any
	at time.Time
}

// statsTable is the short form of what readStats read. With the counters
// of the print before in *last (--watch), byte counts carry their rate
// since then; *last becomes this print's.
func statsTable(w io.Writer, path string, raw map[string]json.RawMessage, last **snapshot) error {
	var caps struct {
		CUDAAvailable bool   `json:"cuda_available"`
		CUDABackend   string `json:"cuda_backend"`
		Devices       []any  `json:"devices"`
		RDMA          struct{ Minter, Fabric string }
	}
	if err := json.Unmarshal(raw[abi.XattrCaps], &caps); err != nil {
		return fmt.Errorf("%s: %s: %w", path, abi.XattrCaps, err)
	}
	var st map[string]any
	if err := json.Unmarshal(raw[abi.XattrStats], &st); err != nil {
		return fmt.Errorf("%s: %s: %w", path, abi.XattrStats, err)
	}
	gpu := "none"
	if caps.CUDAAvailable {
		gpu = fmt.Sprintf("%s, %d devices", caps.CUDABackend, len(caps.Devices))
	}
	rdma := "off"
	if caps.RDMA.Minter != "none" && caps.RDMA.Minter != "" {
		rdma = caps.RDMA.Minter
	} else if caps.RDMA.Fabric != "none" && caps.RDMA.Fabric != "" {
		rdma = caps.RDMA.Fabric
	}
	if c, ok := st["counters"].(map[string]any); ok {
		return fileTable(w, st, c, gpu)
	}
	before, now := *last, time.Now()
	*last = &snapshot{st: st, at: now}
	// rate is ", X GB/s" for a byte count since the print before, if any.
	rate := func(cur func(map[string]any) float64) string {
		if before == nil {
			return ""
		}
		secs := now.Sub(before.at).Seconds()
		if secs <= 0 {
			return ""
		}
		return fmt.Sprintf(", %.2f GB/s", (cur(st)-cur(before.st))/secs/1e9)
	}
	counter := func(k string) func(map[string]any) float64 {
		return func(m map[string]any) float64 { return num(m, k) }
	}
	labelled := func(k, l string) func(map[string]any) float64 {
		return func(m map[string]any) float64 { return labels(m, k)[l] }
	}
	fmt.Fprintf(w, "mount %s: GPU %s, RDMA %s\n", path, gpu, rdma)
	row := func(what, value string) { fmt.Fprintf(w, "  %-22s %s\n", what, value) }

	if before != nil {
		fmt.Fprintln(w, "\nread, by path (GB/s: since the print before)")
	} else {
		fmt.Fprintln(w, "\nread, by path")
	}
	row("POSIX reads", fmt.Sprintf("%s in %s reads%s", bytesOf(num(st, "posix_read_bytes_total")), count(num(st, "posix_reads_total")),
		rate(counter("posix_read_bytes_total"))))
	spliced := bytesOf(num(st, "splice_bytes_total"))
	if g := num(st, "splice_stream_gets_total"); g > 0 {
		spliced += fmt.Sprintf(", streams of preads in %s GETs of their own", count(g))
	}
	row("  of them spliced", spliced)
	gb, gn := labels(st, "gpu_read_bytes_total"), labels(st, "gpu_reads_total")
	row("GPU reads over HTTP", fmt.Sprintf("%s in %s reads%s", bytesOf(gb["http"]), count(gn["http"]),
		rate(labelled("gpu_read_bytes_total", "http"))))
	row("GPU reads over RDMA", fmt.Sprintf("%s in %s reads%s", bytesOf(gb["rdma"]), count(gn["rdma"]),
		rate(labelled("gpu_read_bytes_total", "rdma"))))
	row("from S3", fmt.Sprintf("%s in %s requests%s", bytesOf(num(st, "s3_received_bytes_total")),
		count(sum(labels(st, "s3_requests_total"))), rate(counter("s3_received_bytes_total"))))

	wb, ups := labels(st, "write_bytes_total"), labels(st, "uploads_total")
	if sum(wb) > 0 || sum(ups) > 0 || num(st, "uploads_in_flight") > 0 {
		// A mount that has written (--allow-writes): what, and how it ended.
		fmt.Fprintln(w, "\nwritten, by path")
		row("write(2)", bytesOf(wb["posix"])+rate(labelled("write_bytes_total", "posix")))
		row("GPU writes over HTTP", bytesOf(wb["gpu_http"])+rate(labelled("write_bytes_total", "gpu_http")))
		row("GPU writes over RDMA", bytesOf(wb["gpu_rdma"])+rate(labelled("write_bytes_total", "gpu_rdma")))
		row("uploads", fmt.Sprintf("%s completed, %s aborted, %s in flight; %s requests retried",
			count(ups["completed"]), count(ups["aborted"]), count(num(st, "uploads_in_flight")),
			count(num(st, "upload_part_retries_total"))))
		row("RDMA parts declined", kinds(labels(st, "gpu_write_declined_total"), labels(st, "gpu_write_declined_bytes_total")))
	}

	fmt.Fprintln(w, "\nerrors, by kind")
	row("POSIX reads", kinds(labels(st, "posix_read_errors_total"), nil))
	row("GPU reads", kinds(labels(st, "gpu_read_errors_total"), nil))
	// S3 requests by operation and outcome ("get,error"): the failures.
	failed := map[string]float64{}
	for k, v := range labels(st, "s3_requests_total") {
		op, outcome, _ := strings.Cut(k, ",")
		if outcome != "ok" && outcome != "not_found" && outcome != "canceled" {
			failed[op+" "+outcome] += v
		}
	}
	row("S3 requests", kinds(failed, nil))
	row("  retried GETs", count(num(st, "read_retries_total")))

	fmt.Fprintln(w, "\nGPU reads declined to HTTP, by reason")
	row("declined", kinds(labels(st, "gpu_declined_total"), labels(st, "gpu_declined_bytes_total")))

	fmt.Fprintln(w, "\nmemory")
	used, limit := num(st, "block_memory_bytes"), num(st, "block_memory_limit_bytes")
	pct := 0.0
	if limit > 0 {
		pct = 100 * used / limit
	}
	row("block memory", fmt.Sprintf("%s of %s (%.0f%%, --memory-limit)", bytesOf(used), bytesOf(limit), pct))
	row("  of it cached blocks", fmt.Sprintf("%s; %s hits, %s misses", bytesOf(num(st, "block_cache_bytes")),
		count(num(st, "block_cache_hits_total")), count(num(st, "block_cache_misses_total"))))
	row("in flight from S3", bytesOf(num(st, "bytes_in_flight")))
	if p := num(st, "gpu_staging_pinned_bytes"); p > 0 {
		row("GPU staging, pinned", bytesOf(p))
	}
	row("open files", count(num(st, "open_handles")))
	fmt.Fprintln(w, "\nEvery counter: s3gdsfs stats --json, or Prometheus on --metrics-addr (docs/metrics.md).")
	return nil
}

func fileTable(w io.Writer, st, c map[string]any, gpu string) error {
	size, _ := st["size"].(float64)
	fmt.Fprintf(w, "%v/%v: %s, modified %v, version %v\n", st["bucket"], st["key"], bytesOf(size), st["last_modified"], st["version"])
	row := func(what, value string) { fmt.Fprintf(w, "  %-22s %s\n", what, value) }
	row("POSIX reads", fmt.Sprintf("%s in %s reads (%s spliced)", bytesOf(num(c, "posix_read_bytes")), count(num(c, "posix_reads")),
		bytesOf(num(c, "posix_spliced_bytes"))))
	row("GPU reads", fmt.Sprintf("%s reads: %s over HTTP, %s over RDMA, %s shared (GPU %s)", count(num(c, "gpu_reads")),
		bytesOf(num(c, "gpu_http_bytes")), bytesOf(num(c, "gpu_rdma_bytes")), bytesOf(num(c, "gpu_shared_bytes")), gpu))
	row("GPU reads declined", fmt.Sprintf("%s (%s)", count(num(c, "gpu_declined")), bytesOf(num(c, "gpu_declined_bytes"))))
	if d, ok := st["direct_io"].(bool); ok {
		row("direct I/O", fmt.Sprint(d))
	}
	return nil
}

func num(m map[string]any, k string) float64 {
	v, _ := m[k].(float64)
	return v
}

// labels is a counter by label (absent: none counted yet).
func labels(m map[string]any, k string) map[string]float64 {
	out := map[string]float64{}
	if l, ok := m[k].(map[string]any); ok {
		for name, v := range l {
			if f, ok := v.(float64); ok {
				out[name] = f
			}
		}
	}
	return out
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// kinds lists the non-zero counts, largest first, with their bytes where
// given: "EIO 3, ESTALE 1", or "none".
func kinds(n map[string]float64, b map[string]float64) string {
	var names []string
	for k, v := range n {
		if v > 0 {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Slice(names, func(i, j int) bool {
		if n[names[i]] != n[names[j]] {
			return n[names[i]] > n[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + " " + count(n[k])
		if b != nil {
			parts[i] += " (" + bytesOf(b[k]) + ")"
		}
	}
	return strings.Join(parts, ", ")
}

func count(v float64) string { return fmt.Sprintf("%.0f", v) }

// bytesOf is a byte count in binary units, as the size flags write them.
func bytesOf(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func getxattr(path, name string) ([]byte, error) {
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Getxattr(path, name, buf)
		if err == syscall.ERANGE {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return bytes.TrimSpace(buf[:n]), nil
	}
}
