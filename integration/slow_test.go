package integration

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// A store that keeps sending, but more slowly than a raw body's wake-up
// mark (256 KiB) per --read-timeout, is a transfer that keeps moving, and
// no attempt is cut (docs/operations.md): POSIX, spliced and GPU reads all
// get every byte, with no retry.
func TestSlowStoreReadsSucceed(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 384<<10 + 5, 91
	sum := srv.PutRandomObject(t, "data", "obj", size, seed)
	// 4 KiB every 50 ms: about 80 KiB per one-second read timeout.
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{SegmentSize: 4 << 10, SegmentGap: 50 * time.Millisecond})
	slow := func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.Read.ReadTimeout = time.Second
	}
	t.Run("posix", func(t *testing.T) {
		mp, d := mountOf(t, srv, "data", slow)
		if got := fileSHA256(t, filepath.Join(mp, "obj"), 1<<20); got != sum {
			t.Fatalf("sha256 %s, want %s", got, sum)
		}
		wantMetric(t, d, "read_retries_total", "0", "no attempt cut")
	})
	t.Run("spliced", func(t *testing.T) {
		mp, d := spliceMount(t, srv, "data", slow)
		if got := fileSHA256(t, filepath.Join(mp, "obj"), 1<<20); got != sum {
			t.Fatalf("sha256 %s, want %s", got, sum)
		}
		wantMetric(t, d, "splice_ends_total", "map[done:1]", "one spliced GET to the end")
		wantMetric(t, d, "read_retries_total", "0", "no attempt cut")
	})
	t.Run("gpu", func(t *testing.T) {
		var counted *faultstore.Faulty
		mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
			slow(c)
		}, mounttest.WrapStore(func(s objstore.Store) objstore.Store {
			// No faults: it counts the raw GETs.
			counted = faultstore.NewFaulty(s, faultstore.FaultConfig{})
			return counted
		}))
		f, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		name := hostBuffer(t, dir, "buf", size, 0)
		res, err := s3gds.Read(f, hostRequest(name, 0, size, 0))
		if err != nil || res.Bytes != size {
			t.Fatalf("GPU read: %+v, %v", res, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sha256.Sum256(testenv.RandomBytes(seed, 0, size)) {
			t.Fatal("the GPU read's bytes differ from the object's")
		}
		if c := counted.Counts(); c["raw_calls"] == 0 {
			t.Errorf("no raw GET sent (%s): the test reads the wrong path", faultstore.SortedFaultCounts(c))
		}
		wantMetric(t, d, "read_retries_total", "0", "no attempt cut")
	})
}
