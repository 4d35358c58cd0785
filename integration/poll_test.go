package integration

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// --fuse-poll: with it the daemon's /dev/fuse is non-blocking and its
// threads poll it, without it a plain blocking read (and
// s3gdsfs_fuse_requests_total says which); either way reads are byte-exact,
// a mount left idle past the polling window (its threads asleep in ppoll)
// still answers, and an idle mount does not spin.
func TestFusePollServesReadsAndSleepsWhenIdle(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 5<<20 + 4321
	sum := srv.PutRandomObject(t, "data", "obj.bin", size, 11)
	for _, poll := range []time.Duration{0, time.Millisecond} {
		t.Run("poll="+poll.String(), func(t *testing.T) {
			before := fuseDeviceFDs(t)
			mp, d := mountOf(t, srv, "data", func(c *daemon.Config) { c.FS.PollRequests = poll })
			var opened []int
			for fd := range fuseDeviceFDs(t) {
				if !before[fd] {
					opened = append(opened, fd)
				}
			}
			if len(opened) != 1 {
				t.Fatalf("the mount opened %d /dev/fuse descriptors, want 1", len(opened))
			}
			if nonblock := fdFlags(t, opened[0])&syscall.O_NONBLOCK != 0; nonblock != (poll > 0) {
				t.Fatalf("/dev/fuse O_NONBLOCK = %v with --fuse-poll %v", nonblock, poll)
			}
			path := filepath.Join(mp, "obj.bin")
			if got := fileSHA256(t, path, 1<<20); got != sum {
				t.Fatalf("read sha256 %s, want %s", got, sum)
			}
			// Past the polling window every thread sleeps; the next
			// requests must wake one.
			time.Sleep(20 * time.Millisecond)
			if got := fileSHA256(t, path, 777777); got != sum {
				t.Fatalf("read after idle sha256 %s, want %s", got, sum)
			}
			// Every request was read the way the setting says, and with
			// polling the reads after the idle pause woke a sleeper.
			snap, err := d.Metrics.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			waits := snap["fuse_requests_total"].(map[string]float64)
			if poll == 0 && (waits["blocked"] == 0 || waits["polled"]+waits["slept"] != 0) {
				t.Fatalf("without polling, fuse_requests_total %v: want only blocked", waits)
			}
			if poll > 0 && (waits["blocked"] != 0 || waits["polled"] == 0 || waits["slept"] == 0) {
				t.Fatalf("polling, fuse_requests_total %v: want polled and slept, none blocked", waits)
			}
			// Idle, the process (the daemon's threads; the S3 server is
			// another process) uses next to no CPU: a thread that kept
			// polling would use all of the 300 ms.
			time.Sleep(20 * time.Millisecond)
			c0 := processCPU(t)
			time.Sleep(300 * time.Millisecond)
			if used := processCPU(t) - c0; used > 100*time.Millisecond {
				t.Fatalf("idle mount used %v of CPU in 300ms", used)
			}
		})
	}
}

// fuseDeviceFDs lists this process's descriptors of /dev/fuse.
func fuseDeviceFDs(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[int]bool{}
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			fd, _ := strconv.Atoi(e.Name())
			fds[fd] = true
		}
	}
	return fds
}

// fdFlags reads a descriptor's file status flags from /proc/self/fdinfo.
func fdFlags(t *testing.T, fd int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			f, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo flags %q: %v", v, err)
			}
			return int(f)
		}
	}
	t.Fatalf("no flags in fdinfo of %d", fd)
	return 0
}

func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A thread that has just served a request polls for the whole of
// PollRequests: a reader's next request, which comes after the reader has
// woken to the reply and done its work, finds it running. Here a reader
// pauses 20 ms between 1 MiB direct-I/O reads, longer than a thread that
// has not just served a request polls (PollRequests / 20, 10 ms) and
// shorter than PollRequests (200 ms): each read must be caught polling.
// Each read is a dd of its own: a reader in this process would be
// signalled by the Go runtime inside its reads, and every signal sends
// the daemon FUSE_INTERRUPT requests of its own.
func TestFusePollServedThreadCatchesTheReadersNextRequest(t *testing.T) {
	// 66 MiB: direct I/O, so every read is a request.
	path, d := mountOfOneObject(t, "paced.bin", 66<<20, 7, 200*time.Millisecond)
	out := filepath.Join(t.TempDir(), "block")
	readBlock := func(i int) {
		t.Helper()
		dd := exec.Command("dd", "if="+path, "of="+out, "bs=1M", "count=1", "skip="+strconv.Itoa(i), "status=none")
		if b, err := dd.CombinedOutput(); err != nil {
			t.Fatalf("dd of block %d: %v: %s", i, err, b)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if want := testenv.RandomBytes(7, int64(i)<<20, 1<<20); string(got) != string(want) {
			t.Fatalf("block %d: %d bytes that differ from the object's", i, len(got))
		}
	}
	waits := func() (polled, slept float64) {
		return metricAt(t, d, "fuse_requests_total", "polled"), metricAt(t, d, "fuse_requests_total", "slept")
	}
	readBlock(0)
	time.Sleep(300 * time.Millisecond) // every thread past its window
	polled0, slept0 := waits()
	const reads = 12
	for i := 1; i <= reads; i++ {
		time.Sleep(20 * time.Millisecond)
		readBlock(i)
	}
	polled, slept := waits()
	polled, slept = polled-polled0, slept-slept0
	t.Logf("%d paced reads: %v requests polled, %v slept", reads, polled, slept)
	// Each dd makes five requests (lookup, open, read, flush, release),
	// some of them at once, so a few go to a thread woken from ppoll (3 of
	// 60 here, 5 with the race detector); without the long poll after
	// serving, the first of every dd would too (19 of 60).
	if polled < 3*reads || slept >= reads {
		t.Fatalf("%d paced reads: %v requests polled, %v slept; want those after each pause caught by a polling thread", reads, polled, slept)
	}
}

// A thread asleep in ppoll is woken by every request, and the caller that
// sends the request pays for the wake-up inside its read(2), so a thread
// sleeps there only while no other polls. After a burst has left many
// reader goroutines (one asleep in ppoll, the others waiting for a turn),
// a stream of 1 MiB reads must be read right and served by polling
// threads. On 2 cores a gap past the 5 ms window still leaves a sleeper
// now and then (0-6 of 128 reads woke one beside a poller; 3-11 when a
// thread could sleep beside a poller, whose window ran out while the
// other served); the bound catches a sleeper left beside the pollers for
// good, which wakes for every request.
func TestFusePollStreamWakesNoSleeper(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	// 130 MiB: direct I/O, so every read is a request.
	path, d := mountOfOneObject(t, "stream.bin", 130<<20, 9, 5*time.Millisecond)
	// A burst leaves many reader goroutines; once past their windows one
	// sleeps in ppoll and the others wait for a turn.
	readBurst(t, path, 16, 9)
	waitUntil(t, "a thread asleep in ppoll after the burst", func() bool { return threadsIn(t, syscall.SYS_PPOLL) >= 1 })
	time.Sleep(100 * time.Millisecond)
	const reads = 128
	out := filepath.Join(t.TempDir(), "stream")
	before := metricAt(t, d, "fuse_wakeups_beside_pollers_total", "")
	replies0, replySecs0 := metricAt(t, d, "fuse_read_replies_total", ""), metricAt(t, d, "fuse_read_reply_seconds_total", "")
	// A dd of its own: a reader in this process would be signalled by the
	// Go runtime inside its reads.
	dd := exec.Command("dd", "if="+path, "of="+out, "bs=1M", "count="+strconv.Itoa(reads), "status=none")
	start := time.Now()
	if b, err := dd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v: %s", err, b)
	}
	wall := time.Since(start)
	// Each read was one READ request. A reply's time ends when its write
	// returns, which can come after the reader woken by it has run on the
	// daemon thread's CPU (up to one more read's time), so the sum is
	// bounded by twice the reads' time, not once.
	// A reply is counted once its write returns, which can be after dd has
	// its bytes and exits: wait a moment for the last ones.
	replies := metricAt(t, d, "fuse_read_replies_total", "") - replies0
	for deadline := time.Now().Add(2 * time.Second); replies < reads && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		replies = metricAt(t, d, "fuse_read_replies_total", "") - replies0
	}
	replyTime := time.Duration((metricAt(t, d, "fuse_read_reply_seconds_total", "") - replySecs0) * 1e9)
	t.Logf("%v READ replies, %v from request to reply in all, dd %v", replies, replyTime, wall)
	if replies != reads || replyTime <= 0 || replyTime > 2*wall {
		t.Fatalf("%v READ replies taking %v in all for %d reads in %v; want %d, within twice the reads' time", replies, replyTime, reads, wall, reads)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := testenv.RandomBytes(9, 0, reads<<20); sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("%d bytes read that differ from the object's first %d", len(got), reads<<20)
	}
	woken := metricAt(t, d, "fuse_wakeups_beside_pollers_total", "") - before
	t.Logf("%d streamed reads woke %v threads from ppoll beside a polling thread", reads, woken)
	if woken > reads/8 {
		t.Fatalf("%d streamed reads woke %v threads from ppoll beside a polling thread; want few", reads, woken)
	}
}

// After a burst of concurrent requests has left many reader goroutines
// behind, one of them sleeps in ppoll when the mount is quiet and the
// others wait inside the daemon: a poll sleeper is woken by every request,
// so more would all wake and spin for each one. go-fuse keeps up to
// GOMAXPROCS goroutines reading, so the test runs with 16.
func TestFusePollBoundsThePollers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	// 66 MiB: direct I/O, so every pread is a request; the daemon polls,
	// as every mountOf daemon.
	path, _ := mountOfOneObject(t, "burst.bin", 66<<20, 5, 0)
	readBurst(t, path, 32, 5)
	// The goroutines reach ppoll as their 1 ms windows run out, which a
	// busy machine may put off: wait for the first sleeper, then give the
	// others 100 windows more to join it, as they would without the bound.
	n := 0
	waitUntil(t, "a thread asleep in ppoll on the idle mount", func() bool {
		n = threadsIn(t, syscall.SYS_PPOLL)
		return n >= 1
	})
	time.Sleep(100 * time.Millisecond)
	if n = max(n, threadsIn(t, syscall.SYS_PPOLL)); n != 1 {
		t.Fatalf("%d threads asleep in ppoll on an idle polling mount, want 1", n)
	}
}

// mountOfOneObject mounts a fresh bucket holding one object of size
// random bytes (testenv.RandomBytes of seed) under key, its daemon polling
// for poll (0: mountOf's default), and returns the object's path in the
// mount and the daemon.
func mountOfOneObject(t *testing.T, key string, size, seed int64, poll time.Duration) (string, *daemon.Daemon) {
	t.Helper()
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", key, size, seed)
	var tune func(*daemon.Config)
	if poll > 0 {
		tune = func(c *daemon.Config) { c.FS.PollRequests = poll }
	}
	mp, d := mountOf(t, srv, "data", tune)
	return filepath.Join(mp, key), d
}

// readBurst reads 256 KiB at each of n offsets 2 MiB apart in path at
// once, and checks the bytes against the object's (testenv.RandomBytes
// of seed).
func readBurst(t *testing.T, path string, n int, seed int64) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(path)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			buf := make([]byte, 256<<10)
			off := int64(i) * (2 << 20)
			if _, err := f.ReadAt(buf, off); err != nil {
				errs <- err
				return
			}
			if want := testenv.RandomBytes(seed, off, len(buf)); string(buf) != string(want) {
				errs <- fmt.Errorf("bytes at %d differ from the object's", off)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("burst read: %v", err)
	}
}

// threadsIn counts this process's threads now inside system call nr.
func threadsIn(t *testing.T, nr int) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) > 0 && f[0] == strconv.Itoa(nr) {
			n++
		}
	}
	return n
}
