package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	s3fs "github.com/s3gdsfs/s3gdsfs/fs"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// spliceMount mounts bucket with replies spliced from the socket for
// direct-I/O opens of every size.
func spliceMount(t *testing.T, srv *testenv.Server, bucket string, tune func(*daemon.Config), parts ...mounttest.Part) (string, *daemon.Daemon) {
	t.Helper()
	requireSplice(t, s3fs.DefaultMaxRead)
	return mountOf(t, srv, bucket, func(c *daemon.Config) {
		c.Splice = "always"
		c.Core.DirectIO = vfs.DirectIOAlways
		if tune != nil {
			tune(c)
		}
	}, parts...)
}

// requireSplice skips the test where replies to FUSE reads of up to
// maxRead bytes cannot be spliced: TestMain raises fs.pipe-max-size as
// root, so that is a machine where the tests do not run as root.
func requireSplice(t *testing.T, maxRead int) {
	t.Helper()
	if err := s3fs.SpliceUsable(maxRead); err != nil {
		t.Skipf("replies cannot be spliced here: %v", err)
	}
}

// metric reads one counter (by its name without the s3gdsfs_ prefix) as a
// string, maps of labels included, so that tests can compare it whole.
func metric(t *testing.T, d *daemon.Daemon, name string) string {
	t.Helper()
	snap, err := d.Metrics.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(snap[name])
}

// wantMetric fails the test unless metric name reads want.
func wantMetric(t *testing.T, d *daemon.Daemon, name, want, why string) {
	t.Helper()
	if got := metric(t, d, name); got != want {
		t.Errorf("%s %s, want %s (%s)", name, got, want, why)
	}
}

// readAllChecked reads f to its end with reads of bufSize and checks every
// byte against the object (seed), from off.
func readAllChecked(t *testing.T, f *os.File, seed, off, size int64, bufSize int) {
	t.Helper()
	buf := make([]byte, bufSize)
	for off < size {
		n, err := f.ReadAt(buf, off)
		if n == 0 && err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if !bytes.Equal(buf[:n], testenv.RandomBytes(seed, off, n)) {
			t.Fatalf("read at %d: %d bytes differ from the object", off, n)
		}
		off += int64(n)
	}
}

// A direct-I/O reader from the start of an object is served from one GET's
// socket by splice: every byte right with page-aligned and odd buffers,
// one GET per read of the object, every byte counted as spliced, none
// through the daemon's blocks; on a mount that polls for requests, which
// splices each next reply into a second pipe while this one is written, and
// on one that does not.
func TestSplicedReadsAreByteExactAndSkipTheBlocks(t *testing.T) {
	for _, poll := range []time.Duration{time.Millisecond, 0} {
		t.Run(fmt.Sprintf("fuse-poll=%v", poll), func(t *testing.T) { testSplicedReadsAreByteExact(t, poll) })
	}
}

func testSplicedReadsAreByteExact(t *testing.T, poll time.Duration) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 20<<20 + 4321, 71
	sum := srv.PutRandomObject(t, "data", "big.bin", size, seed)
	mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) { c.FS.PollRequests = poll })
	path := filepath.Join(mp, "big.bin")

	for i, bufSize := range []int{1 << 20, 777_777, 4 << 20} {
		if got := fileSHA256(t, path, bufSize); got != sum {
			t.Fatalf("read with %d-byte buffers: sha256 %s, want %s", bufSize, got, sum)
		}
		if got, want := metric(t, d, "splice_bytes_total"), fmt.Sprint(float64((i+1)*size)); got != want {
			t.Fatalf("after %d reads: spliced bytes %s, want %s", i+1, got, want)
		}
	}
	wantMetric(t, d, "splice_ends_total", "map[done:3]", "one GET per read of the object, each to its end")
	ahead := metric(t, d, "splice_ahead_bytes_total")
	if (poll > 0) == (ahead == "0") {
		t.Errorf("%s bytes spliced ahead of their reads with --fuse-poll %v: want some only on a mount that polls", ahead, poll)
	}
	if got := metric(t, d, "s3_requests_total"); !strings.Contains(got, "get,ok:3") {
		t.Errorf("requests: %s, want 3 GETs", got)
	}
	wantMetric(t, d, "splice_copied_bytes_total", "0", "go-fuse splices every reply on")
	buf := make([]byte, 64<<10)
	k, err := syscall.Getxattr(path, "user.s3gdsfs.stats", buf)
	if err != nil {
		t.Fatalf("stats xattr: %v", err)
	}
	var st struct {
		Counters map[string]int64 `json:"counters"`
	}
	if err := json.Unmarshal(buf[:k], &st); err != nil {
		t.Fatal(err)
	}
	if c := st.Counters; c["posix_spliced_bytes"] != 3*size || c["posix_read_bytes"] != 3*size {
		t.Errorf("file counters %v, want %d bytes read, all spliced", c, 3*size)
	}
	wantMetric(t, d, "block_cache_misses_total", "0", "spliced reads do not go through blocks")
}

// A spliced reader that seeks: without stream feeds its GET ends there and
// ordinary reads serve it from there, byte-exact, counted as having left;
// with them (the default) each run of reads after a seek is spliced from a
// ranged GET of its own, and no read goes through the blocks.
func TestSplicedReaderThatSeeksIsServedByOrdinaryReads(t *testing.T) {
	for _, streams := range []bool{false, true} {
		t.Run(fmt.Sprintf("splice-streams=%v", streams), func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			const size, seed = 24<<20 + 99, 72
			srv.PutRandomObject(t, "data", "big.bin", size, seed)
			mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) { c.Core.SpliceStreams = streams })
			f, err := os.Open(filepath.Join(mp, "big.bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 1<<20)
			for off := int64(0); off < 5<<20; off += 1 << 20 {
				if _, err := f.ReadAt(buf, off); err != nil || !bytes.Equal(buf, testenv.RandomBytes(seed, off, len(buf))) {
					t.Fatalf("read at %d: %v or wrong bytes", off, err)
				}
			}
			readAllChecked(t, f, seed, 17<<20+3, size, 1<<20)
			readAllChecked(t, f, seed, 2<<20, size, 1<<20)
			if !streams {
				wantMetric(t, d, "splice_ends_total", "map[left:1]", "the seek ends the spliced GET")
				wantMetric(t, d, "splice_bytes_total", fmt.Sprint(float64(5<<20)), "the 5 MiB read before the seek")
				return
			}
			// The whole-object GET waits for a read at 5 MiB until the
			// file is closed; each run after a seek reads its GET to its end.
			wantMetric(t, d, "splice_ends_total", "map[done:2]", "each run after a seek reads its own GET to the end")
			wantMetric(t, d, "splice_stream_gets_total", "2", "one ranged GET for each run after a seek")
			wantMetric(t, d, "splice_bytes_total", fmt.Sprint(float64(5<<20+(size-17<<20-3)+(size-2<<20))), "every byte read")
			wantMetric(t, d, "block_cache_misses_total", "0", "no read went through the blocks")
		})
	}
}

// A second reader of the object ends the first one's splice: the two then
// read through blocks they share, and both get every byte right.
func TestSecondReaderEndsTheSpliceAndSharesBlocks(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 32 << 20, 73
	srv.PutRandomObject(t, "data", "big.bin", size, seed)
	mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) { c.Core.CacheSize = 0 })
	path := filepath.Join(mp, "big.bin")
	a, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < 4<<20; off += 1 << 20 {
		if _, err := a.ReadAt(buf, off); err != nil || !bytes.Equal(buf, testenv.RandomBytes(seed, off, len(buf))) {
			t.Fatalf("first reader at %d: %v or wrong bytes", off, err)
		}
	}
	// The second reader starts through blocks (the first splices).
	if _, err := b.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, testenv.RandomBytes(seed, 0, len(buf))) {
		t.Fatalf("second reader at 0: %v or wrong bytes", err)
	}
	readAllChecked(t, a, seed, 4<<20, size, 1<<20)
	readAllChecked(t, b, seed, 1<<20, size, 1<<20)
	wantMetric(t, d, "splice_ends_total", "map[shared:1]", "the second reader ends the splice")
	wantMetric(t, d, "splice_bytes_total", fmt.Sprint(float64(4<<20)), "the first reader's 4 MiB")
}

// A spliced GET that breaks in the middle of its body (the connection
// reset, or stalled past the response timeout) hands the reader to
// ordinary reads where it broke: every byte right, no read much slower
// than the timeout, and the end counted as an error; on a mount that polls,
// whose next reply is spliced beside the one written, as on one that does
// not.
func TestBrokenSplicedGETHandsOverToOrdinaryReads(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 24<<20 + 7, 74
	srv.PutRandomObject(t, "data", "big.bin", size, seed)
	for _, tc := range []struct {
		kind faultproxy.Kind
		poll time.Duration
	}{{faultproxy.Reset, 0}, {faultproxy.StallBody, 0}, {faultproxy.Reset, time.Millisecond}, {faultproxy.StallBody, time.Millisecond}} {
		kind := tc.kind
		t.Run(fmt.Sprintf("%s/fuse-poll=%v", kind, tc.poll), func(t *testing.T) {
			var gets atomic.Int64
			proxy := startProxy(t, srv.Endpoint, faultproxy.Config{Seed: 9, Rate: 1,
				Kinds: []faultproxy.Kind{kind}, StallFor: time.Minute,
				// Only the first GET, the spliced one, breaks.
				Match: func(r *http.Request) bool {
					return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/big.bin") && gets.Add(1) == 1
				}})
			mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) {
				c.FS.PollRequests = tc.poll
				c.S3.Endpoint = proxy.URL
				c.S3.ResponseTimeout = time.Second
				c.Read.ReadTimeout = faultReadTimeout
				c.Read.Retries = faultRetries
			})
			f, err := os.Open(filepath.Join(mp, "big.bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			worst := readSequentialChecked(t, f, seed, size)
			if worst > faultPOSIXBound {
				t.Errorf("a read took %v, above the bound %v", worst, faultPOSIXBound)
			}
			wantMetric(t, d, "splice_ends_total", "map[error:1]", "the broken GET ends in an error")
			if ahead := metric(t, d, "splice_ahead_bytes_total"); (tc.poll > 0) == (ahead == "0") {
				t.Errorf("%s bytes spliced ahead of their reads with --fuse-poll %v: want some only on a mount that polls", ahead, tc.poll)
			}
			if n := proxy.Injected(); n != 1 {
				t.Errorf("faults injected: %d, want the spliced GET's", n)
			}
		})
	}
}

// An object replaced between open and the first read: the spliced GET,
// pinned to the version seen at open, is refused, and the ordinary read
// that serves instead fails with ESTALE, never returning the new bytes.
func TestSpliceOfReplacedObjectIsRefusedAndTheReadIsESTALE(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 8 << 20
	srv.PutRandomObject(t, "data", "x.bin", size, 1)
	mp, d := spliceMount(t, srv, "data", nil)
	f, err := os.Open(filepath.Join(mp, "x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	srv.PutRandomObject(t, "data", "x.bin", size, 2)
	buf := make([]byte, 1<<20)
	if n, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("first read after the replacement: %d bytes, %v; want ESTALE", n, err)
	}
	wantMetric(t, d, "splice_ends_total", "map[refused:1]", "the GET pinned to the old version is refused")
}

// Splice "always" where splicing cannot work fails the mount with a
// message that names the setting (the command turns it into --splice);
// auto mounts without it and says why.
func TestSpliceAlwaysWhereItCannotWorkFailsTheMount(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	cfg := daemon.Default()
	cfg.Mountpoint, cfg.Splice, cfg.Metrics.Addr = t.TempDir(), "always", ""
	cfg.S3.Endpoint = srv.Endpoint
	cfg.Core.Bucket = "data"
	cfg.Core.NoStream = true
	_, err := daemon.Start(cfg)
	if err == nil || !strings.Contains(err.Error(), "Splice always: ") || !strings.Contains(err.Error(), "--stream") {
		t.Fatalf("--splice=always with streams off: %v, want an error naming --splice and --stream", err)
	}
	cfg.Core.NoStream = false
	cfg.S3.Endpoint = "https://127.0.0.1:1"
	if _, err := daemon.Start(cfg); err == nil || !strings.Contains(err.Error(), "Splice always: ") || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("--splice=always with an https endpoint: %v, want an error naming --splice and TLS", err)
	}
	cfg.Splice = "sometimes"
	if _, err := daemon.Start(cfg); err == nil || !strings.Contains(err.Error(), `Splice "sometimes": `) {
		t.Fatalf("Splice sometimes: %v, want an error naming Splice", err)
	}
}

// A body that arrives in many small packets (as over a network of
// 1500-byte frames) brings buffers smaller than pages, more than a reply's
// pipe holds: those replies are copied, the rest of each straight from the
// socket, and the GET goes on to the end. Every byte is right and counted
// once, as spliced or as copied, and nothing is dropped between the pipes.
func TestSplicedBodyInSmallPacketsIsCopiedAndExact(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 3<<20 + 99, 76
	sum := srv.PutRandomObject(t, "data", "big.bin", size, seed)
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{SegmentSize: 1000, SegmentGap: 20 * time.Microsecond})
	mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) { c.S3.Endpoint = proxy.URL })
	if got := fileSHA256(t, filepath.Join(mp, "big.bin"), 1<<20); got != sum {
		t.Fatalf("sha256 %s, want %s", got, sum)
	}
	wantMetric(t, d, "splice_ends_total", "map[done:1]", "one GET to the end")
	wantMetric(t, d, "splice_copied_bytes_total", "0", "go-fuse refused no reply")
	snap, err := d.Metrics.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	small, spliced := snap["splice_small_buffer_bytes_total"].(float64), snap["splice_bytes_total"].(float64)
	if small == 0 || small+spliced != size {
		t.Errorf("%v bytes copied for small buffers, %v spliced: want some copied, %d in all", small, spliced, size)
	}
	// Paced packets: a splice found the socket short of a reply and waited.
	if waits := snap["splice_socket_waits_total"].(float64); waits < 1 {
		t.Errorf("splice_socket_waits_total = %v for a body paced in 1000-byte packets, want at least 1", waits)
	}
	if got := metric(t, d, "s3_requests_total"); !strings.Contains(got, "get,ok:1") {
		t.Errorf("requests: %s, want the one GET", got)
	}
}

// A mount whose store is wrapped in the fault injector still splices (the
// decorator passes raw GETs through), and the injector's faults reach the
// spliced GET: one that breaks in its body hands the reader to ordinary
// reads where it broke, one refused before its reply leaves every read to
// them; every byte right, no read slower than the fault bound.
func TestFaultyStoreStillSplicesAndItsFaultsReachTheSplice(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 24<<20 + 11, 78
	srv.PutRandomObject(t, "data", "big.bin", size, seed)
	for _, tc := range []struct {
		kind faultstore.FaultKind
		ends string
	}{{faultstore.FaultNone, "map[done:1]"}, {faultstore.FaultEarlyEOF, "map[error:1]"},
		{faultstore.FaultStallBody, "map[error:1]"}, {faultstore.FaultError, "map[refused:1]"}} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			var faulty *faultstore.Faulty
			mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) {
				c.S3.ResponseTimeout = time.Second
				c.Read.ReadTimeout = faultReadTimeout
				c.Read.Retries = faultRetries
			}, mounttest.WrapStore(func(s objstore.Store) objstore.Store {
				// The first GET, the spliced one, gets the fault.
				faulty = faultstore.NewFaulty(s, faultstore.FaultConfig{Seed: 5, Script: []faultstore.FaultKind{tc.kind}})
				return faulty
			}))
			f, err := os.Open(filepath.Join(mp, "big.bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			worst := readSequentialChecked(t, f, seed, size)
			if worst > faultPOSIXBound {
				t.Errorf("a read took %v, above the bound %v", worst, faultPOSIXBound)
			}
			wantMetric(t, d, "splice_ends_total", tc.ends, "how the spliced GET ended")
			if tc.kind == faultstore.FaultNone {
				wantMetric(t, d, "splice_bytes_total", fmt.Sprint(float64(size)), "every byte spliced through the decorator")
			}
			if n := faulty.Injected(); (n == 1) != (tc.kind != faultstore.FaultNone) {
				t.Errorf("faults injected: %s", faultstore.SortedFaultCounts(faulty.Counts()))
			}
		})
	}
}

// A spliced reader whose server stops answering mid-object gets EIO within
// the bound docs/operations.md gives for one block, (retries+1) read
// timeouts and the pauses between them (15.25 s with --read-timeout 5s
// --retries 2): the spliced GET that stalled counts as the block's first
// attempt, as a whole-object stream's does.
func TestSplicedReaderFacingAStoppedServerFailsWithinTheDocumentedBound(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, seed = 24 << 20, 75
	srv.PutRandomObject(t, "data", "big.bin", size, seed)
	// The server stops mid-object: the spliced GET sends its headers and
	// part of its body, then nothing (the inner proxy), and every GET after
	// it gets no answer at all (the outer one).
	isGet := func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/big.bin")
	}
	inner := startProxy(t, srv.Endpoint, faultproxy.Config{Seed: 3, Rate: 1,
		Kinds: []faultproxy.Kind{faultproxy.StallBody}, StallFor: time.Minute, Match: isGet})
	var gets atomic.Int64
	proxy := startProxy(t, inner.URL, faultproxy.Config{Seed: 4, Rate: 1,
		Kinds: []faultproxy.Kind{faultproxy.StallHeaders}, StallFor: time.Minute,
		Match: func(r *http.Request) bool { return isGet(r) && gets.Add(1) > 1 }})
	const readTimeout, retries = 5 * time.Second, 2
	// The bound plus the time the bytes take to arrive while they do
	// (docs/operations.md): the stalled GET's body brought bytes at first,
	// and bytes that come short of the socket's wake-up mark count as
	// progress, so its stall can be seen up to one read-timeout after them.
	const documented = (retries+2)*readTimeout + (50+200)*time.Millisecond // 20.25 s
	const slack = 2500 * time.Millisecond
	mp, d := spliceMount(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.S3.ResponseTimeout = readTimeout // as the command sets it: --read-timeout
		c.Read.ReadTimeout = readTimeout
		c.Read.Retries = retries
	})
	f, err := os.Open(filepath.Join(mp, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		start := time.Now()
		n, err := f.ReadAt(buf, off)
		took := time.Since(start)
		if err != nil {
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("read at %d: %v, want EIO", off, err)
			}
			t.Logf("read at %d failed after %v (documented bound %v)", off, took.Round(10*time.Millisecond), documented)
			if took > documented+slack {
				t.Errorf("the failing read took %v, above the documented %v (+%v slack)", took, documented, slack)
			}
			break
		}
		if !bytes.Equal(buf[:n], testenv.RandomBytes(seed, off, n)) {
			t.Fatalf("read at %d: %d bytes differ from the object", off, n)
		}
		if off += int64(n); off >= size {
			t.Fatal("the whole object arrived through a server that stalls every GET")
		}
	}
	wantMetric(t, d, "splice_ends_total", "map[error:1]", "the stalled spliced GET ends in an error")
}

// Threads that each pread chunks of one file, as parallel loaders do, are
// each fed from a spliced ranged GET of their own stream through a real
// mount: every byte right, almost all of them spliced, about one GET per
// chunk, and the object's bytes received once, but for what feeds given up
// early had taken ahead.
func TestParallelPreadsAreSplicedStreamByStream(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size, chunk, threads = 256 << 20, 16 << 20, 8
	sum := srv.PutRandomObject(t, "data", "big.bin", size, 83)
	mp, d := spliceMount(t, srv, "data", nil)
	f, err := os.Open(filepath.Join(mp, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := preadChunks(t, f, size, chunk, threads); got != sum {
		t.Fatalf("%d threads' preads: sha256 %s, want %s", threads, got, sum)
	}
	spliced := metricSum(t, d, "splice_bytes_total")
	gets := metricSum(t, d, "splice_stream_gets_total")
	received := metricSum(t, d, "s3_received_bytes_total")
	t.Logf("%v bytes spliced, %v stream GETs, %v bytes received for %d; ends %s, requests %s, ahead %s, misses %s", spliced, gets, received, size, metric(t, d, "splice_ends_total"), metric(t, d, "s3_requests_total"), metric(t, d, "splice_ahead_bytes_total"), metric(t, d, "block_cache_misses_total"))
	if spliced < size*9/10 {
		t.Errorf("%v of %d bytes spliced: want nearly all", spliced, size)
	}
	if chunks := float64(size / chunk); gets < chunks/2 || gets > chunks+4 {
		t.Errorf("%v stream GETs for %v chunks", gets, chunks)
	}
	// What is received beyond the object is what feeds not read to their
	// range's end (given up, or still open) had spliced ahead of their
	// reader: at most one reply's worth (4 MiB) each, the spare pipe's
	// (mounts that poll).
	notDone := gets + 1 - metricAt(t, d, "splice_ends_total", "done") // the whole-object GET too
	if extra := received - size; extra > notDone*(4<<20) {
		t.Errorf("%v bytes received for a %d-byte object: %v beyond it, more than a reply for each of %v feeds not read to their end", received, size, extra, notDone)
	}
}
