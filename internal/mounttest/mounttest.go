// Package mounttest mounts a real s3gdsfs daemon for tests outside the
// daemon's own packages: the bucket of a test server, GPU reads on the host
// stand-in, the daemon's log in the test's.
package mounttest

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// Standin mounts bucket of srv at mp with the host stand-in as the GPU
// backend, its "device memory" the files in standinDir, and small staging
// (8 x 1 MiB slots); it is unmounted when the test ends.
func Standin(t testing.TB, srv *testenv.Server, bucket, mp, standinDir string) *daemon.Daemon {
	t.Helper()
	cfg := daemon.Config{
		Mountpoint: mp,
		S3: daemon.S3Config{
			Endpoint:    srv.Endpoint,
			Region:      srv.Region,
			Credentials: daemon.StaticCredentials(srv.AccessKey, srv.SecretKey),
		},
		Log: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg.Core.Bucket = bucket
	cfg.Splice = "never"
	cfg.GPU.Mode = "host-standin"
	cfg.GPU.StandinDir = standinDir
	cfg.GPU.SlotSize = 1 << 20
	cfg.GPU.Slots = 8
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

// logWriter hands each line the daemon logs to the test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
