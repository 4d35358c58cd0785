package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// runBench does the whole benchmark. It returns whatever report it could
// build, even on error, so partial figures are still written.
func runBench(ctx context.Context, cfg config, cleanups *cleanupStack) (*report, error) {
	copies := 1
	if cfg.fresh {
		copies = cfg.runs
		if cfg.warmUp() {
			copies++ // the warm-up run's own copy
		}
	}
	set := newObjectSets(cfg.sizeScale, copies)
	r := &report{
		Machine: describeMachine(),
		Setup: setup{Runs: cfg.runs, SizeScale: cfg.sizeScale, Remount: cfg.remount, Fresh: cfg.fresh,
			ReadSize: readSize, GBIs: "1e9 bytes", RunOrder: runsAlternating},
		Objects: set,
	}
	logDir := filepath.Join(cfg.out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	oldLogs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, f := range oldLogs {
		os.Remove(f)
	}

	srv, err := startServer(set.totalBytes(), cleanups, &r.Setup.Server, &r.Setup.PosixDir)
	if err != nil {
		return nil, err
	}

	if err := set.upload(ctx, srv); err != nil {
		return nil, err
	}
	r.Objects = set

	// Mountpoints and credential files live here, away from the output.
	workdir, err := os.MkdirTemp("", "s3gdsfs-bench-")
	if err != nil {
		return nil, err
	}
	cleanups.push(once(func() {
		if err := removeUnlessMounted(workdir); err != nil {
			progress("%v", err)
		}
	}))

	caches := &cacheDropper{}
	serverPid := func() map[string]int { return map[string]int{"server": srv.Pid()} }
	raw, verifyRaw := rawTrials(cfg, srv, set, hooks{beforeRun: func(context.Context) error {
		caches.drop()
		return nil
	}, pids: serverPid})
	// Each target's status is known once its runs are done: a target run
	// has its trials; a skipped one, its status already.
	type entry struct {
		status targetStatus
		trials []*trial
		done   func(context.Context) // verify, and unmount
	}
	entries := []entry{{status: targetStatus{Name: "raw", Version: "minio-go " + moduleVersion("github.com/minio/minio-go/v7")},
		trials: raw, done: verifyRaw}}

	targets := []target{s3gdsfsTarget(cfg.bin, cfg.mountFlags, srv)}
	if cfg.skipPeers {
		entries = append(entries,
			entry{status: targetStatus{Name: "rclone", Status: "skipped", Reason: "-skip-peers"}},
			entry{status: targetStatus{Name: "s3fs", Status: "skipped", Reason: "-skip-peers"}})
	} else {
		targets = append(targets, rcloneTarget(srv, workdir), s3fsTarget(srv, workdir))
	}
	fuseOK, fuseReason := testenv.FUSEAvailable()
	for _, t := range targets {
		if why := t.whyNotRun(ctx, fuseOK, fuseReason); why != "" {
			entries = append(entries, entry{status: targetStatus{Name: t.name, Status: "skipped", Reason: why, Version: t.version}})
			continue
		}
		ts, done := mountTrials(ctx, cfg, t, set, workdir, cleanups, caches, srv.Pid())
		entries = append(entries, entry{status: targetStatus{Name: t.name, Version: t.version}, trials: ts, done: done})
	}

	// The runs of each test alternate between the targets (raw, s3gdsfs,
	// the peers: run 1 of each, then run 2 of each, ...), so that a drift
	// of the machine during the benchmark touches every target's figures
	// alike and the ratios compare runs of the same moments.
	var trials []*trial
	for _, e := range entries {
		trials = append(trials, e.trials...)
	}
	progress("measuring: each test's runs alternate between raw and the mounts")
	runAlternating(ctx, cfg, trials)
	for _, e := range entries {
		if e.done != nil {
			e.done(ctx)
		}
		st := e.status
		if e.trials != nil {
			st = statusOf(st.Name, st.Version, measurementsOf(e.trials))
		}
		r.Targets = append(r.Targets, st)
	}
	r.Measurements = measurementsOf(trials)

	r.Setup.PageCache = caches.status()
	r.computeRatios()
	if ctx.Err() != nil {
		return r, fmt.Errorf("interrupted")
	}
	return r, nil
}

// runsAlternating is the report's name for runAlternating's order.
const runsAlternating = "alternating"

// runAlternating takes the runs of the trials test by test (in the order
// the tests first appear), run i of every trial of a test before run i+1
// of any, and then sums each trial up.
func runAlternating(ctx context.Context, cfg config, trials []*trial) {
	var tests []string
	byTest := map[string][]*trial{}
	for _, t := range trials {
		if _, ok := byTest[t.m.Test]; !ok {
			tests = append(tests, t.m.Test)
		}
		byTest[t.m.Test] = append(byTest[t.m.Test], t)
	}
	for _, test := range tests {
		for i := cfg.firstRun(); i <= cfg.runs; i++ {
			for _, t := range byTest[test] {
				t.step(ctx, i)
			}
		}
	}
	for _, t := range trials {
		t.finish()
	}
}

func measurementsOf(trials []*trial) []*measurement {
	ms := make([]*measurement, len(trials))
	for i, t := range trials {
		ms[i] = t.m
	}
	return ms
}

func statusOf(name, version string, ms []*measurement) targetStatus {
	s := targetStatus{Name: name, Status: "measured", Version: version}
	for _, m := range ms {
		if m.Error != "" {
			s.Status, s.Reason = "failed", m.Error
			break
		}
	}
	return s
}

func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return ""
}

// closeConnections (-close-connections) has the server close every
// connection after its response, versitygw's default.
var closeConnections bool

// startServer starts versitygw on storage with room for total bytes,
// stopped by cleanups, and describes it and where its objects live.
func startServer(total int64, cleanups *cleanupStack, server, posixDir *string) (*testenv.Server, error) {
	gw, err := testenv.FindVersityGW()
	if err != nil {
		return nil, err
	}
	baseDir, where := storageDir(total)
	progress("starting versitygw, objects on %s", where)
	srv, err := testenv.StartServer(testenv.Options{BaseDir: baseDir, Binary: gw, CloseConnections: closeConnections})
	if err != nil {
		return nil, err
	}
	cleanups.push(once(func() {
		progress("stopping versitygw")
		if err := srv.Close(); err != nil {
			progress("%v", err)
		}
	}))
	conns := "keep-alive"
	if closeConnections {
		conns = "a connection per request"
	}
	*server = fmt.Sprintf("versitygw %s at %s, %s", versityGWVersion(gw), srv.Endpoint, conns)
	*posixDir = srv.Dir + " on " + where
	return srv, nil
}
