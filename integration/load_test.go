package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/splice"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// loadSeconds is how long the load test runs: a few seconds in a plain
// `go test`, longer with S3GDSFS_LOAD_SECONDS.
func loadSeconds(t *testing.T) time.Duration {
	if v := os.Getenv("S3GDSFS_LOAD_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("S3GDSFS_LOAD_SECONDS=%q: want a positive number of seconds", v)
		}
		return time.Duration(n) * time.Second
	}
	return 5 * time.Second
}

func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// procStatus reads a "kB" field of /proc/self/status (VmRSS, VmHWM) in bytes.
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return -1
}

// settle waits until cond holds, up to limit, and reports whether it did.
func settle(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		runtime.GC()
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// 64 readers share one mount with little block memory: 40 POSIX (half
// reading whole files in order, half at random offsets) and 24 GPU readers
// (host stand-in), each checking every byte by checksum. Block memory stays
// within --memory-limit throughout; when they are done every block not in
// the cache has been given back; after unmount the goroutines and file
// descriptors are back to what they were before the mount.
func TestLoadManyStreamsWithinMemoryAndNoLeaks(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const nObjects = 8
	objs := make([]faultObject, nObjects)
	sums := make([]string, nObjects)
	for i := range objs {
		objs[i] = faultObject{key: fmt.Sprintf("o%d", i), size: 8<<20 + int64(i)*333_333, seed: int64(500 + i)}
		sums[i] = srv.PutRandomObject(t, "data", objs[i].key, objs[i].size, objs[i].seed)
	}
	bufDir := t.TempDir()
	mp := t.TempDir()

	settle(time.Second, func() bool { return false })
	baseGoroutines, baseFDs := runtime.NumGoroutine(), openFDs()

	const memoryLimit = 32 << 20
	cfg := mounttest.Config(t, srv, "data", mp)
	cfg.Splice = daemon.Default().Splice
	cfg.Metrics.Addr = "127.0.0.1:0"
	cfg.Core.MemoryLimit = memoryLimit
	cfg.Core.CacheSize = 8 << 20
	cfg.Core.PartSize = 4 << 20
	cfg.Core.MaxWindow = 8 << 20
	cfg.GPU.Mode = "host-standin"
	cfg.GPU.StandinDir = bufDir
	cfg.GPU.Staging.SlotSize = 1 << 20
	cfg.GPU.Staging.Slots = 16
	d, err := daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mounted := true
	defer func() {
		if mounted {
			d.Unmount()
			d.Wait()
		}
	}()

	// Sample block memory while the load runs.
	var peakBlocks, peakMetric atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			if used := d.Core.Blocks().Stats().InUseBytes; used > peakBlocks.Load() {
				peakBlocks.Store(used)
			}
			if i%50 == 0 {
				snap, _ := d.Metrics.Snapshot()
				if v, ok := snap["block_memory_bytes"].(float64); ok && int64(v) > peakMetric.Load() {
					peakMetric.Store(int64(v))
				}
			}
		}
	}()

	duration := loadSeconds(t)
	deadline := time.Now().Add(duration)
	var (
		mu       sync.Mutex
		failures []string
		reads    = map[string]int{}
		bytesBy  = map[string]int64{}
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	count := func(kind string, n int64) {
		mu.Lock()
		reads[kind]++
		bytesBy[kind] += n
		mu.Unlock()
	}
	// The GPU streams' buffers, made here: t.Fatal may not run in the
	// streams' goroutines.
	gpuBufs := map[int]*gpuBuf{}
	for s := 40; s < 64; s++ {
		gpuBufs[s] = newGPUBuf(t, bufDir, fmt.Sprintf("s%d", s), 4<<20+64<<10)
	}
	var wg sync.WaitGroup
	for s := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(99, uint64(s)))
			switch {
			case s < 20: // whole files, in order
				for time.Now().Before(deadline) {
					i := r.IntN(nObjects)
					f, err := os.Open(filepath.Join(mp, objs[i].key))
					if err != nil {
						fail("stream %d: open: %v", s, err)
						return
					}
					h := sha256.New()
					n, err := io.CopyBuffer(h, f, make([]byte, 64<<10+r.IntN(192<<10)))
					f.Close()
					if err != nil || hex.EncodeToString(h.Sum(nil)) != sums[i] {
						fail("stream %d: whole read of %s: %d bytes, %v, checksum mismatch", s, objs[i].key, n, err)
						return
					}
					count("posix sequential", n)
				}
			case s < 40: // random preads
				files, err := openAll(mp, objs)
				if err != nil {
					fail("stream %d: %v", s, err)
					return
				}
				defer closeAll(files)
				for time.Now().Before(deadline) {
					i := r.IntN(nObjects)
					off := r.Int64N(objs[i].size)
					n := 1 + r.IntN(1<<20)
					buf := make([]byte, n)
					m, err := files[i].ReadAt(buf, off)
					want := int(min(int64(n), objs[i].size-off))
					if m != want || sha256.Sum256(buf[:m]) != sha256.Sum256(testenv.RandomBytes(objs[i].seed, off, want)) {
						fail("stream %d: pread %s %d@%d: %d bytes, %v, or checksum mismatch", s, objs[i].key, n, off, m, err)
						return
					}
					count("posix random", int64(m))
				}
			default: // GPU reads into the stream's own stand-in buffer
				b := gpuBufs[s]
				files, err := openAll(mp, objs)
				if err != nil {
					fail("stream %d: %v", s, err)
					return
				}
				defer closeAll(files)
				for time.Now().Before(deadline) {
					i := r.IntN(nObjects)
					off := uint64(r.Int64N(objs[i].size))
					n := uint64(1 + r.IntN(4<<20))
					dst := uint64(r.IntN(64 << 10))
					want := min(n, uint64(objs[i].size)-off)
					mark(b.mem[dst : dst+want])
					res, err := s3gds.Read(files[i], hostRequest(b.name, off, n, dst))
					if err != nil || res.Bytes != want {
						fail("stream %d: GPU read %s %d@%d: %+v, %v", s, objs[i].key, n, off, res, err)
						return
					}
					if expect := testenv.RandomBytes(objs[i].seed, int64(off), int(want)); sha256.Sum256(b.mem[dst:dst+want]) != sha256.Sum256(expect) {
						fail("stream %d: GPU read %s %d@%d into +%d: %+v; destination differs: %s", s, objs[i].key, n, off, dst, res,
							describeDiff(b.mem[dst:dst+want], expect, 1<<20, objs))
						return
					}
					count("gpu", int64(want))
				}
			}
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	for _, f := range failures {
		t.Error(f)
	}
	var total int64
	for _, b := range bytesBy {
		total += b
	}
	t.Logf("load: 64 streams for %v: reads %v, %d MiB verified (%.0f MiB/s)", duration, reads, total>>20, float64(total)/(1<<20)/duration.Seconds())
	t.Logf("block memory: peak %d MiB sampled, %d MiB in the metric, limit %d MiB; process peak RSS (VmHWM) %d MiB",
		peakBlocks.Load()>>20, peakMetric.Load()>>20, memoryLimit>>20, procStatus("VmHWM")>>20)
	if peakBlocks.Load() > memoryLimit || peakMetric.Load() > memoryLimit {
		t.Errorf("block memory exceeded --memory-limit %d: sampled %d, metric %d", memoryLimit, peakBlocks.Load(), peakMetric.Load())
	}
	if reads["posix sequential"] == 0 || reads["posix random"] == 0 || reads["gpu"] == 0 {
		t.Errorf("some kind of stream read nothing: %v", reads)
	}

	// Every file is closed: no handle, no import, no byte in flight, and
	// every block outside the cache given back (downloads still finishing
	// get a moment).
	var st string
	if !settle(5*time.Second, func() bool {
		snap, _ := d.Metrics.Snapshot()
		s := d.Core.Blocks().Stats()
		st = fmt.Sprintf("open_handles %v, bytes_in_flight %v, gpu_bytes_in_flight %v, imports %d, blocks in use %d, cached %d",
			snap["open_handles"], snap["bytes_in_flight"], snap["gpu_bytes_in_flight"], d.GPU.Imports().OpenImports(), s.InUseBytes, s.CachedBytes)
		return snap["open_handles"] == 0.0 && snap["bytes_in_flight"] == 0.0 && snap["gpu_bytes_in_flight"] == 0.0 &&
			d.GPU.Imports().OpenImports() == 0 && s.InUseBytes == s.CachedBytes
	}) {
		t.Errorf("after the load, something is still held: %s", st)
	}

	busyGoroutines, busyFDs := runtime.NumGoroutine(), openFDs()
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	d.Wait()
	mounted = false
	// go-fuse keeps a process-wide pool of pipe pairs for splice (and one
	// descriptor of /dev/null): a cache shared by every mount, not a leak of
	// this one. None may still be in use; the idle ones are let go.
	if used := splice.Used(); used != 0 {
		t.Errorf("%d splice pipe pairs still in use after unmount", used)
	}
	splice.ClearSplicePool()
	const slackGoroutines, slackFDs = 4, 2
	var g, fds int
	unmounted := time.Now()
	ok := settle(5*time.Second, func() bool {
		g, fds = runtime.NumGoroutine(), openFDs()
		return g <= baseGoroutines+slackGoroutines && fds <= baseFDs+slackFDs
	})
	t.Logf("goroutines: %d before the mount, %d after the load, %d within %v of unmount; open fds: %d, %d, %d",
		baseGoroutines, busyGoroutines, g, time.Since(unmounted).Round(time.Millisecond), baseFDs, busyFDs, fds)
	if !ok {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Errorf("after unmount: %d goroutines (baseline %d + %d) and %d fds (baseline %d + %d)\n%s",
			g, baseGoroutines, slackGoroutines, fds, baseFDs, slackFDs, summarizeStacks(string(buf[:n])))
		if out, err := os.ReadDir("/proc/self/fd"); err == nil {
			for _, e := range out {
				if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
					t.Logf("fd %s -> %s", e.Name(), target)
				}
			}
		}
	}
}

// summarizeStacks counts goroutines by the function they are parked in.
func summarizeStacks(dump string) string {
	counts := map[string]int{}
	for _, g := range strings.Split(dump, "\n\n") {
		lines := strings.Split(g, "\n")
		if len(lines) < 2 {
			continue
		}
		top := lines[1]
		for i := 1; i+1 < len(lines); i += 2 {
			if !strings.HasPrefix(lines[i], "runtime.") && !strings.HasPrefix(lines[i], "internal/") &&
				!strings.HasPrefix(lines[i], "sync.") && !strings.HasPrefix(lines[i], "syscall.") {
				top = lines[i]
				break
			}
		}
		counts[top]++
	}
	var b strings.Builder
	for k, v := range counts {
		fmt.Fprintf(&b, "%4d %s\n", v, k)
	}
	return b.String()
}

// mark fills a destination with a pattern no object holds, so bytes a read
// failed to deliver show up as the pattern.
func mark(p []byte) {
	for i := range p {
		p[i] = 0xEE
	}
}

// describeDiff says where got differs from want, slot by slot: bytes never
// written (the mark), or whose bytes they are if they belong to a known
// object at another offset.
func describeDiff(got, want []byte, slot int, objs []faultObject) string {
	var parts []string
	for p := 0; p < len(got); p += slot {
		e := min(p+slot, len(got))
		if bytes.Equal(got[p:e], want[p:e]) {
			continue
		}
		first := p
		for first < e && got[first] == want[first] {
			first++
		}
		piece := got[first:min(first+64, e)]
		what := "unknown bytes"
		switch {
		case bytes.Count(piece, []byte{0xEE}) == len(piece):
			what = "never written"
		default:
			for _, o := range objs {
				if at := findInObject(o, piece); at >= 0 {
					what = fmt.Sprintf("bytes of %s at %d", o.key, at)
					break
				}
			}
		}
		parts = append(parts, fmt.Sprintf("slot %d from +%d: %s", p/slot, first, what))
	}
	return strings.Join(parts, "; ")
}

// findInObject looks for piece (at least 16 bytes) in o, 8-byte aligned
// shifts included, and returns its offset or -1.
func findInObject(o faultObject, piece []byte) int64 {
	if len(piece) < 16 {
		return -1
	}
	const chunk = 4 << 20
	for off := int64(0); off < o.size; off += chunk - 64 {
		data := testenv.RandomBytes(o.seed, off, int(min(chunk, o.size-off)))
		if i := bytes.Index(data, piece); i >= 0 {
			return off + int64(i)
		}
	}
	return -1
}

// openAll opens every object of the load through the mount.
func openAll(mp string, objs []faultObject) ([]*os.File, error) {
	files := make([]*os.File, 0, len(objs))
	for _, o := range objs {
		f, err := os.Open(filepath.Join(mp, o.key))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("open: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
