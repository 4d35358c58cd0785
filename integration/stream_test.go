package integration

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// A whole-object stream that breaks in any way the store can break hands
// its blocks to ranged GETs: the reader gets every byte right, no read
// waits longer than the fault bound, and the stream is counted as ended by
// an error. The first GET of each mount is the stream, so the decorator's
// script hits it and nothing else.
func TestBrokenWholeObjectStreamHandsOverToRangedGETs(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 24<<20 + 4321
	srv.PutRandomObject(t, "data", "seq.bin", size, 31)
	for _, kind := range []faultstore.FaultKind{faultstore.FaultError, faultstore.FaultEarlyEOF,
		faultstore.FaultStallBody, faultstore.FaultShort, faultstore.FaultLong} {
		t.Run(kind.String(), func(t *testing.T) {
			var faulty *faultstore.Faulty
			mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
				c.Read.ReadTimeout = faultReadTimeout
				c.Read.Retries = faultRetries
			}, mounttest.WrapStore(func(s objstore.Store) objstore.Store {
				faulty = faultstore.NewFaulty(s, faultstore.FaultConfig{Script: []faultstore.FaultKind{kind}})
				return faulty
			}))
			f, err := os.Open(filepath.Join(mp, "seq.bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			worst := readSequentialChecked(t, f, 31, size)
			if worst > faultPOSIXBound {
				t.Errorf("a read took %v, above the bound %v", worst, faultPOSIXBound)
			}
			if faulty.Injected() != 1 {
				t.Fatalf("faults injected: %s", faultstore.SortedFaultCounts(faulty.Counts()))
			}
			ends := func() string {
				snap, err := d.Metrics.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(snap["read_streams_total"], snap["read_stream_ends_total"])
			}
			// The stream's goroutine counts its end as it leaves.
			if !settle(5*time.Second, func() bool { return ends() == "1 map[error:1]" }) {
				t.Fatalf("streams started and ended: %s, want 1 ended by an error", ends())
			}
		})
	}
}

// Two processes' worth of readers of one object through the mount, with no
// block cache, each a block behind the other in turn: the object comes
// from S3 about once, not twice, and both read every byte right.
func TestReadersOfOneObjectFetchItOnce(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 32<<20 + 12345
	srv.PutRandomObject(t, "data", "shared.bin", size, 71)
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.Core.CacheSize = 0             // none
		c.Core.DirectIOMinSize = 1 << 20 // direct I/O: every byte through the daemon
	})
	var fs [2]*os.File
	for i := range fs {
		f, err := os.Open(filepath.Join(mp, "shared.bin"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs[i] = f
	}
	before := metricSum(t, d, "s3_received_bytes_total")
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i, f := range fs { // the first reader, then the second a block behind
			n, err := f.ReadAt(buf, off)
			if err != nil && err != io.EOF {
				t.Fatalf("reader %d at %d: %v", i, off, err)
			}
			if want := min(int64(len(buf)), size-off); int64(n) != want || !bytes.Equal(buf[:n], testenv.RandomBytes(71, off, n)) {
				t.Fatalf("reader %d at %d: %d bytes, differing from the object or short of %d", i, off, n, want)
			}
		}
	}
	got := metricSum(t, d, "s3_received_bytes_total") - before
	kept := metricSum(t, d, "blocks_kept_for_readers_total")
	t.Logf("%v bytes from S3 for two reads of %d, %v blocks kept", got, size, kept)
	if got > size*5/4 || kept == 0 {
		t.Fatalf("%v bytes from S3 for two readers of a %d-byte object, %v blocks kept: want about one object", got, size, kept)
	}
}

// readSequentialChecked reads f from where it is to the end of the object
// (size bytes, seed) in 1 MiB reads, checks every byte and that the end
// is EOF, and returns the longest read.
func readSequentialChecked(t *testing.T, f *os.File, seed, size int64) (worst time.Duration) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		start := time.Now()
		n, err := f.Read(buf)
		worst = max(worst, time.Since(start))
		if err != nil && err != io.EOF {
			t.Fatalf("read at %d: %v", off, err)
		}
		if n == 0 {
			t.Fatalf("read at %d: end of file before %d bytes", off, size)
		}
		if !bytes.Equal(buf[:n], testenv.RandomBytes(seed, off, n)) {
			t.Fatalf("read at %d: %d bytes differ from the object", off, n)
		}
		off += int64(n)
	}
	if n, err := f.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read at the end: %d bytes, %v; want EOF", n, err)
	}
	return worst
}
