// Package mounttest mounts a real s3gdsfs daemon for tests outside the
// daemon's own packages: the bucket of a test server, the daemon's log in
// the test's, GPU reads on the host stand-in where asked.
package mounttest

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// Config is a mount of bucket of srv at mp with the defaults
// (daemon.Default), logging warnings to the test, never splicing (whether
// --splice=auto splices depends on the machine: tests of splicing ask for
// it) and serving no metrics (tests that read them ask for a port).
func Config(t testing.TB, srv *testenv.Server, bucket, mp string) daemon.Config {
	cfg := daemon.Default()
	cfg.Mountpoint = mp
	cfg.S3.Endpoint, cfg.S3.Region = srv.Endpoint, srv.Region
	cfg.S3.Credentials = daemon.StaticCredentials(srv.AccessKey, srv.SecretKey)
	cfg.Log = slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Core.Bucket = bucket
	cfg.Splice = "never"
	cfg.Metrics.Addr = ""
	return cfg
}

// Start mounts cfg; it is unmounted when the test ends.
func Start(t testing.TB, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	d, err := daemon.Start(cfg)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return d
}

// Standin mounts bucket of srv at mp with the host stand-in as the GPU
// backend, its "device memory" the files in standinDir, and small staging
// (8 x 1 MiB slots).
func Standin(t testing.TB, srv *testenv.Server, bucket, mp, standinDir string) *daemon.Daemon {
	t.Helper()
	cfg := Config(t, srv, bucket, mp)
	cfg.GPU.Mode = "host-standin"
	cfg.GPU.StandinDir = standinDir
	cfg.GPU.Staging.SlotSize = 1 << 20
	cfg.GPU.Staging.Slots = 8
	return Start(t, cfg)
}

// logWriter hands each line the daemon logs to the test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
