// Package mounttest mounts a real s3gdsfs daemon for tests outside the
// daemon's own packages: the bucket of a test server, the daemon's log in
// the test's, GPU reads on the host stand-in where asked, and the parts a
// test hands the daemon (a decorated store, a loopback fabric it drives).
package mounttest

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
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
	// The test's own upload journal, never the user's.
	cfg.Core.Writes.Journal = t.TempDir()
	return cfg
}

// A Part is a collaborator a test hands the daemon in place of the one the
// daemon would build, made once the mount's Config is final.
type Part func(t testing.TB, cfg daemon.Config) daemon.Part

// WrapStore hands the daemon the S3 client it would build for the mount
// (daemon.NewStore), decorated by wrap: faults, counts, delays. The daemon
// meters what wrap returns.
func WrapStore(wrap func(objstore.Store) objstore.Store) Part {
	return func(t testing.TB, cfg daemon.Config) daemon.Part {
		client, err := daemon.NewStore(cfg)
		if err != nil {
			t.Fatalf("S3 client: %v", err)
		}
		t.Cleanup(client.CloseIdleConnections) // after the unmount, registered later
		return daemon.WithStore(wrap(client))
	}
}

// Fabric hands a mount of GPU.RDMA "loopback" f as its fabric, for the
// test to switch its modes and read its counts.
func Fabric(f *loopback.Fabric) Part {
	return func(testing.TB, daemon.Config) daemon.Part { return daemon.WithFabric(f) }
}

// Start mounts cfg with parts; it is unmounted when the test ends.
func Start(t testing.TB, cfg daemon.Config, parts ...Part) *daemon.Daemon {
	t.Helper()
	with := make([]daemon.Part, 0, len(parts))
	for _, p := range parts {
		with = append(with, p(t, cfg))
	}
	d, err := daemon.Start(cfg, with...)
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
	return Start(t, StandinConfig(t, srv, bucket, mp, standinDir))
}

// StandinConfig is the Config of Standin, for a test to change before Start.
func StandinConfig(t testing.TB, srv *testenv.Server, bucket, mp, standinDir string) daemon.Config {
	cfg := Config(t, srv, bucket, mp)
	cfg.GPU.Mode = "host-standin"
	cfg.GPU.StandinDir = standinDir
	cfg.GPU.Staging.SlotSize = 1 << 20
	cfg.GPU.Staging.Slots = 8
	return cfg
}

// logWriter hands each line the daemon logs to the test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
