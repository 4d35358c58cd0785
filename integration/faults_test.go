package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/faultstore"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
)

// The settings of the fault tests, and the bound on one call they imply.
//
// One ranged GET that makes no progress is abandoned after readTimeout and
// sent again up to retries times, after pauses of 50, 200 and 800 ms
// (objstore.Backoff), so one block (POSIX) or one staging slot (GPU) has its
// bytes or an error within
//
//	(retries+1)*readTimeout + 50+200+800 ms.
//
// A GPU read fetches its slots in parallel streams and waits for the slowest:
// one such bound, as long as it need not wait for a staging slot that
// another read holds or for its turn in the GPU scheduler (the test gives
// every stream its own slot, and 16 workers of 4 streams stay within the
// scheduler's 64 operations in flight). A pread(2) of at most one block may wait on the kernel's
// readahead request, and after that failed on the one-page request the
// kernel sends to read the page itself: two requests in series, each of
// which reads at most two blocks (a request of up to 1 MiB spans two 1 MiB
// blocks), one after the other. So:
//
//	GPU read:   blockBound + slack
//	POSIX read: 2 requests * 2 blocks * blockBound + slack
//
// The slack covers scheduling on a loaded two-core machine.
const (
	faultReadTimeout = time.Second
	faultRetries     = 3
	faultBackoffs    = (50 + 200 + 800) * time.Millisecond
	faultSlack       = 3 * time.Second
	faultBlockBound  = (faultRetries+1)*faultReadTimeout + faultBackoffs
	faultGPUBound    = faultBlockBound + faultSlack
	faultPOSIXBound  = 2*2*faultBlockBound + faultSlack
)

// faultObject is one object of the fault tests: size bytes of RandomData(seed).
type faultObject struct {
	key  string
	size int64
	seed int64
}

func putFaultObjects(t *testing.T, srv *testenv.Server, bucket string, n int, base int64) []faultObject {
	t.Helper()
	var objs []faultObject
	for i := range n {
		o := faultObject{key: fmt.Sprintf("f%d.bin", i), size: 3<<20 + int64(i)*777_777 + 13, seed: base + int64(i)}
		srv.PutRandomObject(t, bucket, o.key, o.size, o.seed)
		objs = append(objs, o)
	}
	return objs
}

// tally counts outcomes of reads from many goroutines.
type tally struct {
	mu        sync.Mutex
	ok        map[string]int // "posix", "gpu"
	failed    map[string]int // "posix EIO", ...
	partial   int            // preads that returned fewer bytes than asked before EOF
	eintr     int
	bytes     int64
	worst     map[string]time.Duration
	worstWhat map[string]string
	problems  []string
}

func newTally() *tally {
	return &tally{ok: map[string]int{}, failed: map[string]int{}, worst: map[string]time.Duration{}, worstWhat: map[string]string{}}
}

func (c *tally) took(path string, d time.Duration, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > c.worst[path] {
		c.worst[path] = d
		c.worstWhat[path] = what
	}
}

func (c *tally) problem(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.problems) < 20 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

func (c *tally) add(path string, err error, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.ok[path]++
		c.bytes += n
		return
	}
	var en syscall.Errno
	name := "other"
	if errors.As(err, &en) {
		name = unix.ErrnoName(en)
	}
	c.failed[path+" "+name]++
}

func (c *tally) reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.ok {
		n += v
	}
	for _, v := range c.failed {
		n += v
	}
	return n
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	for k := range c.failed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var fails []string
	for _, k := range keys {
		fails = append(fails, fmt.Sprintf("%s=%d", k, c.failed[k]))
	}
	return fmt.Sprintf("verified posix=%d gpu=%d (%d MiB), failed [%s], partial preads %d, EINTR retried %d, worst posix %v (%s), worst gpu %v (%s)",
		c.ok["posix"], c.ok["gpu"], c.bytes>>20, strings.Join(fails, " "), c.partial, c.eintr,
		c.worst["posix"].Round(time.Millisecond), c.worstWhat["posix"], c.worst["gpu"].Round(time.Millisecond), c.worstWhat["gpu"])
}

// preadVerified reads [off, off+n) of o through f with pread(2), one
// syscall at a time, checking every byte that comes back against the
// object and timing every call. EINTR is retried, as read loops do. It
// returns the first error.
func preadVerified(f *os.File, o faultObject, off int64, n int, c *tally) error {
	fd := int(f.Fd())
	buf := make([]byte, n)
	got := 0
	for got < n {
		start := time.Now()
		m, err := unix.Pread(fd, buf[got:], off+int64(got))
		d := time.Since(start)
		c.took("posix", d, fmt.Sprintf("%s %d@%d: %v", o.key, n-got, off+int64(got), err))
		if errors.Is(err, unix.EINTR) {
			c.mu.Lock()
			c.eintr++
			c.mu.Unlock()
			continue
		}
		if m > 0 {
			want := testenv.RandomBytes(o.seed, off+int64(got), m)
			if sha256.Sum256(buf[got:got+m]) != sha256.Sum256(want) {
				c.problem("CORRUPT: pread %s %d@%d returned %d bytes that differ from the object", o.key, n-got, off+int64(got), m)
				return errors.New("corrupt")
			}
		}
		if err != nil {
			return err
		}
		if m == 0 {
			if off+int64(got) < o.size {
				c.problem("pread %s at %d returned 0 bytes before the end (%d)", o.key, off+int64(got), o.size)
			}
			return nil
		}
		if m < n-got && off+int64(got+m) < o.size {
			c.mu.Lock()
			c.partial++
			c.mu.Unlock()
		}
		got += m
	}
	return nil
}

// gpuBuf is a host stand-in "device allocation", mapped here too so the
// test can reset and inspect it.
type gpuBuf struct {
	name string
	mem  []byte
}

func newGPUBuf(t *testing.T, dir, name string, size int) *gpuBuf {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return &gpuBuf{name: name, mem: mem}
}

// gpuVerified reads [off, off+n) of o into b at dst and checks the
// destination by checksums: on success it holds the object's bytes, and on
// failure every slot-sized piece of it holds either the fill it had before
// or the object's bytes, never anything else.
func gpuVerified(f *os.File, o faultObject, b *gpuBuf, off, n, dst uint64, slot int, c *tally) error {
	const fill = 0x5A
	region := b.mem[dst : dst+n]
	for i := range region {
		region[i] = fill
	}
	start := time.Now()
	res, err := s3gds.Read(f, hostRequest(b.name, off, n, dst))
	c.took("gpu", time.Since(start), fmt.Sprintf("%s %d@%d: %v", o.key, n, off, err))
	want := uint64(max(0, min(int64(n), o.size-int64(off))))
	if err == nil {
		if res.Bytes != want {
			c.problem("gpu read %s %d@%d delivered %d bytes, want %d", o.key, n, off, res.Bytes, want)
			return nil
		}
		if expect := testenv.RandomBytes(o.seed, int64(off), int(want)); sha256.Sum256(region[:want]) != sha256.Sum256(expect) {
			c.problem("CORRUPT: gpu read %s %d@%d into %s+%d: %+v; destination differs from the object: %s", o.key, n, off, b.name, dst, res,
				describeDiffFill(region[:want], expect, slot, fill))
		}
		if slices.ContainsFunc(region[want:], func(x byte) bool { return x != fill }) {
			c.problem("gpu read %s %d@%d wrote past the %d bytes it reported", o.key, n, off, want)
		}
		return nil
	}
	fillSum := map[int]([32]byte){}
	for p := uint64(0); p < n; p += uint64(slot) {
		e := min(p+uint64(slot), n)
		piece := region[p:e]
		if _, ok := fillSum[len(piece)]; !ok {
			fillSum[len(piece)] = sha256.Sum256(bytes.Repeat([]byte{fill}, len(piece)))
		}
		sum := sha256.Sum256(piece)
		if sum == fillSum[len(piece)] {
			continue
		}
		okLen := min(int64(e), int64(want)) - int64(p)
		if okLen > 0 && sum == sha256.Sum256(append(testenv.RandomBytes(o.seed, int64(off+p), int(okLen)), bytes.Repeat([]byte{fill}, len(piece)-int(okLen))...)) {
			continue
		}
		// Reads that share a fetch (--gpu-share) get its slots, which are
		// aligned to the fetch's start rather than this read's: a failed
		// read may hold part of a slot of the object's bytes, each in its
		// place. Every byte must still be the fill or the object's.
		if okLen > 0 {
			expect := testenv.RandomBytes(o.seed, int64(off+p), int(okLen))
			if func() bool {
				for i, x := range piece {
					if x != fill && (i >= int(okLen) || x != expect[i]) {
						return false
					}
				}
				return true
			}() {
				continue
			}
		}
		c.problem("CORRUPT: failed gpu read %s %d@%d (%v) left bytes at +%d that are neither the fill nor the object's", o.key, n, off, err, p)
	}
	return err
}

// faultWorkload runs reads from workers goroutines until total reads are
// done: POSIX preads at random offsets and lengths, and every gpuEvery-th
// read a GPU read into the worker's stand-in buffer.
func faultWorkload(t *testing.T, mp, bufDir string, objs []faultObject, workers, total, gpuEvery int, seed uint64, c *tally, allowed func(path string, err error) bool) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		buf := newGPUBuf(t, bufDir, fmt.Sprintf("w%d", w), 2<<20+64<<10)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			files := make([]*os.File, len(objs))
			for i, o := range objs {
				f, err := os.Open(filepath.Join(mp, o.key))
				if err != nil {
					c.problem("open %s: %v", o.key, err)
					return
				}
				defer f.Close()
				files[i] = f
			}
			for {
				i := next.Add(1)
				if i > int64(total) {
					return
				}
				oi := r.IntN(len(objs))
				o, f := objs[oi], files[oi]
				if gpuEvery > 0 && i%int64(gpuEvery) == 0 {
					off := uint64(r.Int64N(o.size + 1000))
					n := uint64(1 + r.IntN(2<<20))
					dst := uint64(r.IntN(64 << 10))
					err := gpuVerified(f, o, buf, off, n, dst, 1<<20, c)
					c.add("gpu", err, int64(n))
					if err != nil && !allowed("gpu", err) {
						c.problem("gpu read %s %d@%d: %v (not an allowed errno)", o.key, n, off, err)
					}
					continue
				}
				off := r.Int64N(o.size)
				n := 1 + r.IntN(512<<10)
				err := preadVerified(f, o, off, n, c)
				c.add("posix", err, int64(n))
				if err != nil && !allowed("posix", err) {
					c.problem("pread %s %d@%d: %v (not an allowed errno)", o.key, n, off, err)
				}
				// Drop the file's pages so the next read of them goes to
				// the daemon, not to the kernel's page cache.
				unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			}
		}()
	}
	wg.Wait()
}

func onlyEIO(path string, err error) bool { return errors.Is(err, unix.EIO) }

// releaseAtEnd makes a test's daemon release its background work, metrics
// listener and staging memory after mountOf's cleanup has unmounted it:
// Daemon.Unmount alone leaves them, and only Daemon.Wait frees them. Call
// it before mounting (cleanups run last-registered first) and hand it the
// daemon.
func releaseAtEnd(t *testing.T) func(*daemon.Daemon) {
	var d *daemon.Daemon
	t.Cleanup(func() {
		if d == nil {
			return
		}
		done := make(chan struct{})
		go func() { d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the daemon did not shut down within 10s of its unmount")
		}
	})
	return func(x *daemon.Daemon) { d = x }
}

// releasedMount is mountOf for a daemon released at the end of the test.
func releasedMount(t *testing.T, srv *testenv.Server, bucket string, tune func(*daemon.Config), parts ...mounttest.Part) (string, *daemon.Daemon) {
	t.Helper()
	keep := releaseAtEnd(t)
	mp, d := mountOf(t, srv, bucket, tune, parts...)
	keep(d)
	return mp, d
}

// releasedGPUMount is gpuMount for a daemon released at the end of the test.
func releasedGPUMount(t *testing.T, srv *testenv.Server, bucket string, tune func(*daemon.Config), parts ...mounttest.Part) (string, string, *daemon.Daemon) {
	t.Helper()
	keep := releaseAtEnd(t)
	// GPU reads under faults share their fetches (--gpu-share), so that
	// a fault in a shared GET is met by every reader of it.
	mp, dir, d := gpuMount(t, srv, bucket, func(c *daemon.Config) {
		c.GPU.Share = true
		if tune != nil {
			tune(c)
		}
	}, parts...)
	keep(d)
	return mp, dir, d
}

// startProxy puts a fault proxy in front of upstream for the test's life.
func startProxy(t testing.TB, upstream string, cfg faultproxy.Config) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(upstream, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// faultMount mounts bucket through addr (the fault proxy) with the GPU
// stand-in, small timeouts and little memory.
func faultMount(t *testing.T, srv *testenv.Server, bucket, endpoint string, tune func(*daemon.Config), parts ...mounttest.Part) (string, string, *daemon.Daemon) {
	t.Helper()
	return releasedGPUMount(t, srv, bucket, func(c *daemon.Config) {
		if endpoint != "" {
			c.S3.Endpoint = endpoint
		}
		c.Read.ReadTimeout = faultReadTimeout
		c.Read.Retries = faultRetries
		c.Core.MemoryLimit = 64 << 20
		c.Core.CacheSize = 2 << 20 // little cache: most reads go to the server
		c.Core.MetaTTL = time.Hour
		// A slot for every stream of every worker: a GPU read never queues
		// behind another for staging memory, so the bound is per call.
		c.GPU.Staging.Slots = 16 * 4
		if tune != nil {
			tune(c)
		}
	}, parts...)
}

// Reads through a real mount, with a proxy in front of versitygw breaking a
// quarter of the ranged GETs in every way it knows. No read may return a
// wrong byte; each one succeeds or fails with EIO within the bound.
func TestRandomReadsUnderProxyFaults(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	objs := putFaultObjects(t, srv, "data", 4, 40)
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{Seed: 20260101, Rate: 0.25, StallFor: time.Minute})
	mp, bufDir, d := faultMount(t, srv, "data", proxy.URL, nil)

	c := newTally()
	start := time.Now()
	faultWorkload(t, mp, bufDir, objs, 16, 1024, 4, 1, c, onlyEIO)
	t.Logf("random faults: %d reads in %v: %s", c.reads(), time.Since(start).Round(time.Millisecond), c)
	t.Logf("faults injected by the proxy: %s", faultstore.SortedFaultCounts(proxy.Counts()))
	snap, _ := d.Metrics.Snapshot()
	t.Logf("daemon: read retries %v, posix read errors %v, gpu read errors %v", snap["read_retries_total"], snap["posix_read_errors_total"], snap["gpu_read_errors_total"])

	for _, p := range c.problems {
		t.Error(p)
	}
	// A server that does not answer is retried, then EIO: never EINTR.
	// Nor does the Go runtime's preemption signal, landing while a reader
	// waits in pread(2), fail a read: only a kill cancels one.
	readErrors, _ := snap["posix_read_errors_total"].(map[string]float64)
	daemonEINTR := readErrors["EINTR"]
	if c.eintr > 0 || daemonEINTR > 0 {
		t.Errorf("%d preads failed with EINTR (the daemon answered EINTR %v times): a server that does not answer must be retried, then fail with EIO", c.eintr, daemonEINTR)
	}
	if c.reads() < 1000 {
		t.Errorf("only %d reads ran", c.reads())
	}
	if c.ok["posix"] < 500 || c.ok["gpu"] < 150 {
		t.Errorf("too few reads succeeded under a 25%% fault rate with %d retries: %s", faultRetries, c)
	}
	counts := proxy.Counts()
	for _, k := range faultproxy.AllKinds() {
		if counts[k.String()] == 0 {
			t.Errorf("the proxy never injected %v: %s", k, faultstore.SortedFaultCounts(counts))
		}
	}
	checkBound(t, c)

	// An outage: every ranged GET fails. Every read fails with EIO, and
	// within the bound.
	proxy.SetRate(1)
	out := newTally()
	start = time.Now()
	faultWorkload(t, mp, bufDir, objs, 12, 24, 2, 2, out, onlyEIO)
	t.Logf("outage: %d reads in %v: %s", out.reads(), time.Since(start).Round(time.Millisecond), out)
	for _, p := range out.problems {
		t.Error(p)
	}
	if out.ok["posix"]+out.ok["gpu"] > 0 {
		// The cache may hold a block from before: only a read that needed
		// the server must fail.
		t.Logf("reads served from cache during the outage: %d", out.ok["posix"]+out.ok["gpu"])
	}
	if out.failed["posix EIO"] == 0 || out.failed["gpu EIO"] == 0 {
		t.Errorf("outage: want POSIX and GPU reads to fail with EIO: %s", out)
	}
	checkBound(t, out)

	// Once the server is reachable again, reads succeed.
	proxy.SetRate(0)
	after := newTally()
	faultWorkload(t, mp, bufDir, objs, 4, 40, 4, 3, after, func(string, error) bool { return false })
	for _, p := range after.problems {
		t.Error(p)
	}
	if after.ok["posix"]+after.ok["gpu"] != 40 {
		t.Errorf("after the outage: %s", after)
	}
}

func checkBound(t *testing.T, c *tally) {
	t.Helper()
	if c.worst["posix"] > faultPOSIXBound {
		t.Errorf("a pread took %v, above the bound %v: %s", c.worst["posix"], faultPOSIXBound, c.worstWhat["posix"])
	}
	if c.worst["gpu"] > faultGPUBound {
		t.Errorf("a GPU read took %v, above the bound %v: %s", c.worst["gpu"], faultGPUBound, c.worstWhat["gpu"])
	}
}

// storeFaultMount is faultMount of bucket "data" with the Faulty decorator
// between the daemon and minio-go, failing 30% of calls (seeded), and
// half-second stall bounds; tune, when given, adjusts the rest.
func storeFaultMount(t *testing.T, srv *testenv.Server, seed uint64, tune func(*daemon.Config)) (string, string, *daemon.Daemon, *faultstore.Faulty) {
	t.Helper()
	var faulty *faultstore.Faulty
	mp, bufDir, d := faultMount(t, srv, "data", "", func(c *daemon.Config) {
		c.Read.ReadTimeout = 500 * time.Millisecond
		if tune != nil {
			tune(c)
		}
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store {
		faulty = faultstore.NewFaulty(s, faultstore.FaultConfig{Seed: seed, Rate: 0.3})
		return faulty
	}))
	return mp, bufDir, d, faulty
}

// The same through the Faulty decorator between the daemon and minio-go:
// besides errors, early ends and stalls, bodies lie about their length,
// shorter or longer than the range, which the read paths must catch. Both
// ways of reading a GET's body: on a connection of its own (--raw-gets,
// --gpu-raw-gets: the default), where the faults strike the raw body, and
// through the HTTP client.
func TestRandomReadsUnderStoreFaults(t *testing.T) {
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			objs := putFaultObjects(t, srv, "data", 3, 60)
			mp, bufDir, _, faulty := storeFaultMount(t, srv, 77, func(c *daemon.Config) {
				c.Core.ClientGets, c.GPU.ClientGets = !raw, !raw
			})
			c := newTally()
			start := time.Now()
			faultWorkload(t, mp, bufDir, objs, 12, 500, 3, 4, c, onlyEIO)
			t.Logf("store faults: %d reads in %v: %s", c.reads(), time.Since(start).Round(time.Millisecond), c)
			counts := faulty.Counts()
			t.Logf("faults injected by the decorator: %s", faultstore.SortedFaultCounts(counts))
			for _, p := range c.problems {
				t.Error(p)
			}
			for _, k := range faultstore.AllFaults() {
				if counts[k.String()] == 0 {
					t.Errorf("no %v fault was injected", k)
				}
			}
			if c.ok["posix"] < 250 || c.ok["gpu"] < 100 {
				t.Errorf("too few reads succeeded: %s", c)
			}
			if raws := counts["raw_calls"]; raw != (raws > 0) {
				t.Errorf("raw GETs %v, yet %d sent", raw, raws)
			}
		})
	}
}

// GPU reads of fetches of their own (no sharing, the default) through the
// staging pool while bodies fail, end early, stall or lie about their
// length: slots of 64 KiB, so a read crosses many and a fault lands after
// some of its copies are enqueued, and two copy streams that the GETs share.
// Every delivered byte is checked against the object and a failed read
// leaves nothing but the fill or the object's bytes in its destination,
// and nothing past it.
//
// Both ways of reading a GET's body: through the HTTP client, and on a
// connection of its own (--gpu-raw-gets), where the faults strike the raw
// body.
func TestGPUReadsOfTheirOwnUnderStoreFaults(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			srv := testenv.Start(t)
			srv.CreateBucket(t, "data")
			objs := putFaultObjects(t, srv, "data", 3, 61)
			mp, bufDir, d, faulty := storeFaultMount(t, srv, 78, func(c *daemon.Config) {
				c.GPU.Share = false
				c.GPU.Staging.SlotSize = 64 << 10
				c.GPU.Staging.Slots = 128
				c.GPU.Staging.Streams = 2
				c.GPU.ClientGets = !raw
			})
			c := newTally()
			start := time.Now()
			faultWorkload(t, mp, bufDir, objs, 8, 240, 1, 5, c, onlyEIO)
			t.Logf("store faults, GPU reads of their own: %d reads in %v: %s", c.reads(), time.Since(start).Round(time.Millisecond), c)
			counts := faulty.Counts()
			t.Logf("faults injected by the decorator: %s", faultstore.SortedFaultCounts(counts))
			for _, p := range c.problems {
				t.Error(p)
			}
			if c.ok["gpu"] < 100 || c.ok["posix"] > 0 {
				t.Errorf("want GPU reads only, most of them through: %s", c)
			}
			snap, _ := d.Metrics.Snapshot()
			if shared, _ := snap["gpu_shared_bytes_total"].(float64); shared != 0 {
				t.Errorf("%v bytes shared with sharing off", shared)
			}
			if raws := counts["raw_calls"]; raw != (raws > 0) {
				t.Errorf("--gpu-raw-gets %v, yet %d raw GETs", raw, raws)
			}
		})
	}
}

// A deleted object is gone at the next open once the cached name expires.
func TestDeletedObjectIsENOENTAtNextOpen(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "gone.bin", 100_000, 8)
	const ttl = 500 * time.Millisecond
	mp, _ := releasedMount(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = ttl
		c.Core.NegativeTTL = ttl
	})
	path := filepath.Join(mp, "gone.bin")
	got, err := os.ReadFile(path)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(testenv.RandomBytes(8, 0, 100_000)) {
		t.Fatalf("read before delete: %v", err)
	}
	if err := srv.Client.RemoveObject(context.Background(), "data", "gone.bin", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 200*time.Millisecond)
	if _, err := os.Open(path); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("open after delete: %v, want ENOENT", err)
	}
	entries, err := os.ReadDir(mp)
	if err != nil || len(entries) != 0 {
		t.Fatalf("listing after delete: %v %v", entries, err)
	}
}

// pagedHook runs after the first full page of a listing of prefix.
type pagedHook struct {
	objstore.Store
	prefix string
	once   sync.Once
	after  func()
	pages  atomic.Int64
}

func (h *pagedHook) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	p, err := h.Store.List(ctx, bucket, prefix, cont, maxKeys)
	if prefix == h.prefix && maxKeys != 1 && err == nil {
		h.pages.Add(1)
		if cont == "" && p.Next != "" {
			h.once.Do(h.after)
		}
	}
	return p, err
}

// Keys added and removed while a directory of more than one page is listed
// (versitygw pages at 1000) give no duplicate, lose no key that existed
// throughout, and show no removed key.
func TestListingThatChangesBetweenPages(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	dir := filepath.Join(srv.Dir, "data", "many")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 2500
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("k%05d", i*2)), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var added, removed []string
	hook := &pagedHook{prefix: "many/"}
	hook.after = func() {
		// Before the cursor, around it and after it; and removals after it.
		for _, i := range []int{1, 3, 1999, 2001, 2003, 3001, 4999, 5001} {
			name := fmt.Sprintf("k%05d", i)
			if err := os.WriteFile(filepath.Join(dir, name), []byte("new"), 0o644); err != nil {
				t.Error(err)
			}
			added = append(added, name)
		}
		for _, i := range []int{2400, 3000, 4998} {
			name := fmt.Sprintf("k%05d", i)
			os.Remove(filepath.Join(dir, name))
			removed = append(removed, name)
		}
		// A directory that sorts among the files.
		os.MkdirAll(filepath.Join(dir, "k03501", "sub"), 0o755)
		os.WriteFile(filepath.Join(dir, "k03501", "sub", "x"), []byte("x"), 0o644)
		added = append(added, "k03501")
	}
	mp, _ := releasedMount(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = time.Second
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { hook.Store = s; return hook }))
	entries, err := os.ReadDir(filepath.Join(mp, "many"))
	if err != nil {
		t.Fatal(err)
	}
	if hook.pages.Load() < 3 {
		t.Fatalf("the listing took %d pages; the test needs several", hook.pages.Load())
	}
	seen := map[string]int{}
	for _, e := range entries {
		seen[e.Name()]++
	}
	for name, k := range seen {
		if k > 1 {
			t.Errorf("%s listed %d times", name, k)
		}
	}
	stable := 0
	for i := range n {
		name := fmt.Sprintf("k%05d", i*2)
		if slices.Contains(removed, name) {
			if seen[name] > 0 {
				t.Errorf("%s was removed before the listing reached it, yet it is listed", name)
			}
			continue
		}
		stable++
		if seen[name] == 0 {
			t.Errorf("%s existed throughout and is missing", name)
		}
	}
	known := map[string]bool{}
	for i := range n {
		known[fmt.Sprintf("k%05d", i*2)] = true
	}
	for _, a := range added {
		known[a] = true
	}
	for name := range seen {
		if !known[name] {
			t.Errorf("%s listed but never existed", name)
		}
	}
	t.Logf("listed %d names over %d pages (%d stable, added %v, removed %v)", len(entries), hook.pages.Load(), stable, added, removed)
	// A second listing sees the new state exactly.
	time.Sleep(1100 * time.Millisecond)
	entries, err = os.ReadDir(filepath.Join(mp, "many"))
	if err != nil || len(entries) != n+len(added)-len(removed) {
		t.Fatalf("second listing: %d entries, %v; want %d", len(entries), err, n+len(added)-len(removed))
	}
}

// gateStore holds ranged GETs from offset gateAt until the gate opens.
type gateStore struct {
	objstore.Store
	gateAt  int64
	reached chan struct{}
	once    sync.Once
	gate    chan struct{}
}

func (g *gateStore) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	if off >= g.gateAt {
		g.once.Do(func() { close(g.reached) })
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Store.GetRange(ctx, bucket, key, off, n, v)
}

// An object replaced in the middle of a GPU read: the read fails with
// ESTALE, and the destination holds only the old version's bytes (or what
// it held before), never any of the new version's.
func TestObjectReplacedDuringGPUReadIsESTALE(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 8 << 20
	srv.PutRandomObject(t, "data", "x.bin", size, 1)
	gate := &gateStore{gateAt: 4 << 20, reached: make(chan struct{}), gate: make(chan struct{})}
	mp, dir, _ := releasedGPUMount(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = 300 * time.Millisecond
		c.GPU.PartSize = 1 << 20 // one GET per MiB, so one of them starts past the gate
	}, mounttest.WrapStore(func(s objstore.Store) objstore.Store { gate.Store = s; return gate }))
	f, err := os.Open(filepath.Join(mp, "x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := newGPUBuf(t, dir, "dst", size)
	const fill = 0x5A
	for i := range buf.mem {
		buf.mem[i] = fill
	}
	done := make(chan error, 1)
	go func() {
		_, err := s3gds.Read(f, hostRequest(buf.name, 0, size, 0))
		done <- err
	}()
	select {
	case <-gate.reached:
	case err := <-done:
		t.Fatalf("the read finished before it reached the gate: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the read never reached the second half")
	}
	srv.PutRandomObject(t, "data", "x.bin", size, 2)
	close(gate.gate)
	if err := <-done; !errors.Is(err, unix.ESTALE) {
		t.Fatalf("GPU read across a replacement: %v, want ESTALE", err)
	}
	old, fresh := 0, 0
	fillSum := sha256.Sum256(bytes.Repeat([]byte{fill}, 1<<20))
	for p := 0; p < size; p += 1 << 20 {
		sum := sha256.Sum256(buf.mem[p : p+1<<20])
		switch sum {
		case fillSum:
			fresh++
		case sha256.Sum256(testenv.RandomBytes(1, int64(p), 1<<20)):
			old++
		case sha256.Sum256(testenv.RandomBytes(2, int64(p), 1<<20)):
			t.Errorf("MiB %d of the destination holds the new version", p>>20)
		default:
			t.Errorf("MiB %d of the destination holds neither version nor the fill", p>>20)
		}
	}
	t.Logf("after ESTALE: %d MiB of the old version, %d untouched, none of the new", old, fresh)
	if old == 0 {
		t.Error("no old-version bytes landed before the gate: the test did not test a read in progress")
	}
	// A new open, once the name's cache expires, reads the new version whole.
	f.Close()
	time.Sleep(400 * time.Millisecond)
	f2, err := os.Open(filepath.Join(mp, "x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	res, err := s3gds.Read(f2, hostRequest(buf.name, 0, size, 0))
	if err != nil || res.Bytes != size || res.Transport != abi.TransportHTTP {
		t.Fatalf("read of the new version: %+v %v", res, err)
	}
	if sha256.Sum256(buf.mem) != sha256.Sum256(testenv.RandomBytes(2, 0, size)) {
		t.Fatal("the reopened file did not deliver the new version")
	}
}

// describeDiffFill says, slot by slot, where got differs from want: bytes
// left as they were (fill), or other bytes.
func describeDiffFill(got, want []byte, slot int, fill byte) string {
	var parts []string
	for p := 0; p < len(got); p += slot {
		e := min(p+slot, len(got))
		if bytes.Equal(got[p:e], want[p:e]) {
			continue
		}
		first, last := p, e-1
		for first < e && got[first] == want[first] {
			first++
		}
		for last > first && got[last] == want[last] {
			last--
		}
		what := "other bytes"
		if bytes.Count(got[first:last+1], []byte{fill}) == last+1-first {
			what = "left unwritten"
		}
		parts = append(parts, fmt.Sprintf("slot %d: [+%d, +%d] %s", p/slot, first, last, what))
	}
	return strings.Join(parts, "; ")
}

// GPU reads interrupted again and again by a signal the caller handles
// (the kernel turns each into a FUSE INTERRUPT): only a kill cancels a
// read (TestOnlyAKillInterruptsARead), so every call succeeds, with every
// byte it reports in place.
func TestInterruptedGPUReadsNeverReportMissingBytes(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	o := faultObject{key: "big.bin", size: 6<<20 + 99, seed: 81}
	srv.PutRandomObject(t, "data", o.key, o.size, o.seed)
	mp, bufDir, d := releasedGPUMount(t, srv, "data", func(c *daemon.Config) {
		c.GPU.Staging.SlotSize = 256 << 10
		c.GPU.Staging.Slots = 4  // reads queue for slots: they take a while
		c.GPU.PartSize = 1 << 20 // and most take two GETs
	})
	f, err := os.Open(filepath.Join(mp, o.key))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := newGPUBuf(t, bufDir, "dst", int(o.size))
	const fill = 0x5A

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	stop := make(chan struct{})
	defer close(stop)
	var signals atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			// SIGURG: the Go runtime's own preemption signal, which it
			// ignores when it did not send it.
			unix.Tgkill(unix.Getpid(), tid, unix.SIGURG)
			signals.Add(1)
			time.Sleep(time.Duration(100+rand.IntN(20_000)) * time.Microsecond)
		}
	}()
	var eintr, ok, missing int
	deadline := time.Now().Add(6 * time.Second)
	r := rand.New(rand.NewPCG(5, 6))
	for time.Now().Before(deadline) {
		off := uint64(r.Int64N(o.size - 2<<20))
		n := uint64(1<<20 + r.IntN(1<<20))
		for i := range b.mem[:n] {
			b.mem[i] = fill
		}
		req := hostRequest(b.name, off, n, 0)
		req.Size, req.Version = abi.Size, abi.Version
		raw := req.Encode()
		err := rawIoctl(f, abi.IocRead, raw)
		if errors.Is(err, unix.EINTR) {
			eintr++
			continue
		}
		if err != nil {
			t.Fatalf("GPU read: %v", err)
		}
		var out abi.ReadRequest
		out.UnmarshalBinary(raw)
		if out.Bytes != n {
			t.Fatalf("GPU read reported %d bytes, want %d", out.Bytes, n)
		}
		ok++
		if expect := testenv.RandomBytes(o.seed, int64(off), int(n)); sha256.Sum256(b.mem[:n]) != sha256.Sum256(expect) {
			missing++
			if missing <= 3 {
				t.Errorf("a GPU read reported success for %d bytes at %d; its destination differs: %s", n, off,
					describeDiffFill(b.mem[:n], expect, 256<<10, fill))
			}
		}
	}
	interrupts := metricAt(t, d, "fuse_interrupts_total", "found")
	t.Logf("%d signals, %v INTERRUPT requests: %d reads succeeded, %d answered EINTR, %d succeeded with bytes missing", signals.Load(), interrupts, ok, eintr, missing)
	if interrupts == 0 {
		t.Error("no read was interrupted: the test did not test interruption")
	}
	if eintr != 0 {
		t.Errorf("%d reads answered EINTR for a signal the caller handles", eintr)
	}
	if ok == 0 {
		t.Error("no read succeeded")
	}
}

// GPU reads over the loopback fabric, with the proxy in front of versitygw
// breaking a quarter of the ranged GETs: the fabric's own upstream GETs and
// the HTTP GETs its declines fall back to. No read may return a wrong byte
// or write outside its range; each succeeds or fails with EIO within the
// bound, and once the server is whole again the bytes go over RDMA.
func TestLoopbackRDMAReadsUnderProxyFaults(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	objs := putFaultObjects(t, srv, "data", 3, 83)
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{Seed: 20261203, Rate: 0.25, StallFor: time.Minute})
	fabric := loopback.NewFabric()
	mp, bufDir, d := faultMount(t, srv, "data", proxy.URL, func(c *daemon.Config) { c.GPU.RDMA = "loopback" }, mounttest.Fabric(fabric))
	bytesBy := func() (rdma, declined float64) {
		snap, err := d.Metrics.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range snap["gpu_declined_bytes_total"].(map[string]float64) {
			declined += v
		}
		return snap["gpu_read_bytes_total"].(map[string]float64)["rdma"], declined
	}

	c := newTally()
	faultWorkload(t, mp, bufDir, objs, 8, 160, 1, 11, c, onlyEIO)
	t.Logf("loopback RDMA under proxy faults: %s; faults: %s", c, faultstore.SortedFaultCounts(proxy.Counts()))
	for _, p := range c.problems {
		t.Error(p)
	}
	if c.ok["gpu"] < 80 {
		t.Errorf("too few GPU reads succeeded under a 25%% fault rate: %s", c)
	}
	checkBound(t, c)
	rdma, declined := bytesBy()
	if rdma == 0 || declined == 0 {
		t.Errorf("under faults %v bytes over RDMA and %v declined: want both", rdma, declined)
	}
	if st := fabric.Stats(); st.Served == 0 {
		t.Errorf("the fabric served nothing: %+v", st)
	}

	proxy.SetRate(0)
	after := newTally()
	faultWorkload(t, mp, bufDir, objs, 4, 40, 1, 12, after, func(string, error) bool { return false })
	for _, p := range after.problems {
		t.Error(p)
	}
	if after.ok["gpu"] != 40 {
		t.Errorf("after the faults: %s", after)
	}
	if rdma2, declined2 := bytesBy(); rdma2 <= rdma || declined2 != declined {
		t.Errorf("without faults: RDMA bytes %v -> %v, declined %v -> %v: want every byte over RDMA", rdma, rdma2, declined, declined2)
	}
}
