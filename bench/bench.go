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
			ReadSize: readSize, GBIs: "1e9 bytes"},
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

	gw, err := testenv.FindVersityGW()
	if err != nil {
		return nil, err
	}
	baseDir, where := storageDir(set.totalBytes())
	progress("starting versitygw, objects on %s", where)
	srv, err := testenv.StartServer(testenv.Options{BaseDir: baseDir, Binary: gw})
	if err != nil {
		return nil, err
	}
	cleanups.push(once(func() {
		progress("stopping versitygw")
		if err := srv.Close(); err != nil {
			progress("%v", err)
		}
	}))
	r.Setup.Server = fmt.Sprintf("versitygw %s at %s", versityGWVersion(gw), srv.Endpoint)
	r.Setup.PosixDir = srv.Dir + " on " + where

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
	progress("raw: minio-go against versitygw")
	serverPid := func() map[string]int { return map[string]int{"server": srv.Pid()} }
	raw := benchRaw(ctx, cfg, srv, set, hooks{beforeRun: func(context.Context) error {
		caches.drop()
		return nil
	}, pids: serverPid})
	r.Measurements = append(r.Measurements, raw...)
	r.Targets = append(r.Targets, statusOf("raw", "minio-go "+moduleVersion("github.com/minio/minio-go/v7"), raw))

	targets := []target{s3gdsfsTarget(cfg.bin, cfg.mountFlags, srv)}
	if cfg.skipPeers {
		r.Targets = append(r.Targets,
			targetStatus{Name: "rclone", Status: "skipped", Reason: "-skip-peers"},
			targetStatus{Name: "s3fs", Status: "skipped", Reason: "-skip-peers"})
	} else {
		targets = append(targets, rcloneTarget(srv, workdir), s3fsTarget(srv, workdir))
	}
	fuseOK, fuseReason := testenv.FUSEAvailable()
	for _, t := range targets {
		if t.skipReason == "" && !fuseOK {
			t.skipReason = "FUSE unavailable: " + fuseReason
		}
		if t.skipReason != "" {
			progress("%s: skipped: %s", t.name, t.skipReason)
			r.Targets = append(r.Targets, targetStatus{Name: t.name, Status: "skipped", Reason: t.skipReason, Version: t.version})
			continue
		}
		if ctx.Err() != nil {
			r.Targets = append(r.Targets, targetStatus{Name: t.name, Status: "skipped", Reason: "interrupted", Version: t.version})
			continue
		}
		ms := benchMount(ctx, cfg, t, set, workdir, cleanups, caches, srv.Pid())
		r.Measurements = append(r.Measurements, ms...)
		r.Targets = append(r.Targets, statusOf(t.name, t.version, ms))
	}

	r.Setup.PageCache = caches.status()
	r.computeRatios()
	if ctx.Err() != nil {
		return r, fmt.Errorf("interrupted")
	}
	return r, nil
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
