// Command bench measures the POSIX read path of s3gdsfs against raw
// minio-go GETs and against peer FUSE filesystems (rclone, s3fs), all over
// one versitygw server on loopback, and checks the project's throughput
// goals. Run it with `make bench` (which installs the peers and builds
// bin/s3gdsfs), or directly:
//
//	go run ./bench -bin bin/s3gdsfs -out out/bench [-runs 3] [-size-scale 0.25] [-skip-peers] [-fresh=false] [-remount]
//
// It writes out/bench/posix.json and out/bench/posix.txt (also printed on
// stdout); progress goes to stderr and daemon logs to out/bench/logs/.
//
// With -names it instead measures names and small files (names.go):
//
//	go run ./bench -names -bin bin/s3gdsfs -out out/bench-names [-names-files 10000] [-names-workers 8]
//
// and writes names.json, names.txt and names-objects.json.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type config struct {
	bin        string
	out        string
	runs       int
	sizeScale  float64
	skipPeers  bool
	mountFlags string
	remount    bool
	fresh      bool
	runTimeout time.Duration
}

// warmUp: with fresh objects on a kept mount, one untimed run comes first.
func (c config) warmUp() bool { return c.fresh && !c.remount }

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	flag.StringVar(&cfg.bin, "bin", "bin/s3gdsfs", "s3gdsfs binary to benchmark")
	flag.StringVar(&cfg.out, "out", "out/bench", "directory for posix.json, posix.txt and mount logs")
	flag.IntVar(&cfg.runs, "runs", 3, "timed runs per measurement")
	flag.Float64Var(&cfg.sizeScale, "size-scale", 1, "scale object sizes (0.25 for a quick run)")
	flag.BoolVar(&cfg.skipPeers, "skip-peers", false, "do not measure rclone and s3fs")
	flag.StringVar(&cfg.mountFlags, "s3gdsfs-flags", "", "extra flags for `s3gdsfs mount`, space-separated (to compare settings)")
	flag.BoolVar(&cfg.fresh, "fresh", true, "every timed run reads its own copy of the objects, so nothing a run reads was read before (one mount per target: a warm daemon, nothing cached); -fresh=false re-reads one copy")
	flag.BoolVar(&cfg.remount, "remount", false, "mount afresh before every timed run (a cold daemon each time; with -fresh=false, no daemon-side cache survives between runs)")
	flag.BoolVar(&closeConnections, "close-connections", false, "the server closes every connection after its response (versitygw's default; figures recorded before keep-alive was the harness's default were taken so)")
	flag.DurationVar(&cfg.runTimeout, "run-timeout", 10*time.Minute, "abort a timed run (and its mount) after this long")
	var names bool
	var ncfg namesConfig
	flag.BoolVar(&names, "names", false, "measure names and small files instead: listing a prefix of many small objects and a loader epoch opening each by name")
	flag.IntVar(&ncfg.files, "names-files", 10000, "with -names: small objects under the one prefix")
	flag.IntVar(&ncfg.workers, "names-workers", 8, "with -names: concurrent readers in an epoch (and uploaders)")
	flag.Parse()
	if cfg.runs < 1 || cfg.sizeScale <= 0 || cfg.sizeScale > 16 {
		fmt.Fprintln(os.Stderr, "bench: need -runs >= 1 and 0 < -size-scale <= 16")
		return 2
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cleanups := &cleanupStack{}
	defer cleanups.run()
	handleInterrupts(cancel, cleanups)

	if names {
		if ncfg.files < 1 || ncfg.workers < 1 {
			fmt.Fprintln(os.Stderr, "bench: need -names-files >= 1 and -names-workers >= 1")
			return 2
		}
		report, err := runNames(ctx, cfg, ncfg, cleanups)
		return finish(cfg, report, report != nil, err, "FAILED: some steps failed or read wrong data; see %s/names.txt")
	}
	report, err := runBench(ctx, cfg, cleanups)
	return finish(cfg, report, report != nil, err, "some measurements failed; see %s/posix.txt")
}

// finish writes a run's report, when there is one, and gives the exit
// status: 1 when the run or any of its measurements failed.
func finish(cfg config, r interface {
	write(dir string) error
	failed() bool
}, have bool, err error, failedFormat string) int {
	if have {
		if werr := r.write(cfg.out); werr != nil {
			progress("writing report: %v", werr)
			return 1
		}
	}
	if err != nil {
		progress("bench failed: %v", err)
		return 1
	}
	if r.failed() {
		progress(failedFormat, cfg.out)
		return 1
	}
	return 0
}

// handleInterrupts turns the first Ctrl-C into a cancelled context (the
// run then unwinds and cleans up) and, if unwinding hangs on a stuck mount
// or a second signal arrives, cleans up directly and exits.
func handleInterrupts(cancel context.CancelFunc, cleanups *cleanupStack) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		progress("%v: stopping and cleaning up", sig)
		cancel()
		select {
		case <-sigs:
		case <-time.After(30 * time.Second):
		}
		progress("forcing cleanup")
		cleanups.run()
		os.Exit(130)
	}()
}

var started = time.Now()

// progress reports what the benchmark is doing; stdout carries only the table.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}
