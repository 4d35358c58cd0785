package integration

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// Only a kill interrupts a read, as with NFS: a signal the reader handles
// (dd prints its progress on SIGUSR1) leaves its read waiting for the
// store, which then completes with the right bytes and no EINTR, while a
// reader killed inside a read, or killed after a handled signal (for which
// the kernel sends no second INTERRUPT), leaves at once rather than when
// the store answers. Each read waits on a GET the proxy stalls.
func TestOnlyAKillInterruptsARead(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 66 << 20 // direct I/O: dd's read is a request
	for i, key := range []string{"slow-handled.bin", "slow-killed.bin", "slow-handled-killed.bin"} {
		srv.PutRandomObject(t, "data", key, size, int64(30+i))
	}
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{
		Seed: 3, Rate: 1, Kinds: []faultproxy.Kind{faultproxy.StallHeaders}, StallFor: time.Minute,
		Match: func(r *http.Request) bool { return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "slow-") },
	})
	const stallGuard = 2 * time.Second // a stalled GET is given up and retried after this
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.Read.ReadTimeout = stallGuard
	})
	out := t.TempDir()
	stalls := func() int64 { return proxy.Counts()[faultproxy.StallHeaders.String()] }
	// startDD starts dd on key and returns once it is inside its read,
	// which waits for the stalled GET: the waits are for states, not for
	// times, so a busy machine only makes them longer.
	startDD := func(key string) (*exec.Cmd, string) {
		t.Helper()
		dst, src := filepath.Join(out, key), filepath.Join(mp, key)
		stalled := stalls()
		dd := exec.Command("dd", "if="+src, "of="+dst, "bs=1M", "count=1", "status=none")
		if err := dd.Start(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "dd inside its read of "+key+", its GET stalled", func() bool {
			return inRead(dd.Process.Pid, src) && stalls() > stalled
		})
		return dd, dst
	}
	eintr := func() float64 { return metricAt(t, d, "posix_read_errors_total", "EINTR") }
	interrupts := func() float64 { return metricAt(t, d, "fuse_interrupts_total", "found") }
	// signalled sends dd SIGUSR1 and waits for the INTERRUPT request the
	// kernel makes of it to reach the daemon.
	signalled := func(t *testing.T, dd *exec.Cmd) {
		t.Helper()
		i0 := interrupts()
		if err := dd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the signal's INTERRUPT request", func() bool { return interrupts() > i0 })
	}
	// killAndWait kills dd, waits for it, and fails unless it left before
	// the first stalled GET would even have been given up (stallGuard):
	// a read the kill did not end would last until the store's retries
	// ran out, (Retries+1) stall guards after its first GET. Anything
	// shorter than one is a kill that worked, on however busy a machine.
	killAndWait := func(t *testing.T, dd *exec.Cmd, when string) {
		t.Helper()
		killed := time.Now()
		if err := dd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		err := dd.Wait()
		if ws, ok := dd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("dd: %v, want killed by SIGKILL", err)
		}
		took := time.Since(killed)
		t.Logf("killed %s: left in %v", when, took)
		if took > stallGuard {
			t.Fatalf("a reader killed %s took %v to leave, as long as the store's stall", when, took)
		}
	}

	t.Run("handled", func(t *testing.T) {
		e0 := eintr()
		dd, dst := startDD("slow-handled.bin")
		signalled(t, dd)
		proxy.SetRate(0) // the retry after the stall guard gets the bytes
		defer proxy.SetRate(1)
		if err := dd.Wait(); err != nil {
			t.Fatalf("dd after a handled signal: %v", err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if want := testenv.RandomBytes(30, 0, 1<<20); string(got) != string(want) {
			t.Fatalf("dd read %d bytes that differ from the object's", len(got))
		}
		if e := eintr() - e0; e != 0 {
			t.Fatalf("a handled signal failed %v reads with EINTR", e)
		}
	})
	t.Run("killed", func(t *testing.T) {
		dd, _ := startDD("slow-killed.bin")
		killAndWait(t, dd, "inside a read")
	})
	t.Run("handled-then-killed", func(t *testing.T) {
		dd, _ := startDD("slow-handled-killed.bin")
		signalled(t, dd)
		killAndWait(t, dd, "after a handled signal")
	})
}

// When the mount's connection is aborted (echo 1 >
// /sys/fs/fuse/connections/N/abort), the kernel answers every caller
// itself and go-fuse closes every request's cancel channel: a read that
// kept going after a signal its reader handled stops too, rather than
// when the store answers, even though the reader lives on, so that
// unmounting, which waits for the daemon's requests to return, ends at
// once.
func TestAnAbortedMountEndsAHandledRead(t *testing.T) {
	requireFusectl(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 66 << 20 // direct I/O: the read is a request
	srv.PutRandomObject(t, "data", "slow.bin", size, 40)
	proxy := startProxy(t, srv.Endpoint, faultproxy.Config{
		Seed: 4, Rate: 1, Kinds: []faultproxy.Kind{faultproxy.StallHeaders}, StallFor: time.Minute,
		Match: func(r *http.Request) bool { return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "slow") },
	})
	const stallGuard = 2 * time.Second // a stalled GET is given up and retried after this
	mp, d := mountOf(t, srv, "data", func(c *daemon.Config) {
		c.S3.Endpoint = proxy.URL
		c.Read.ReadTimeout = stallGuard
	})
	var st syscall.Stat_t
	if err := syscall.Stat(mp, &st); err != nil {
		t.Fatal(err)
	}
	abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
	eintr := func() float64 { return metricAt(t, d, "posix_read_errors_total", "EINTR") }
	e0 := eintr()
	f, err := os.Open(filepath.Join(mp, "slow.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The reader is a thread of this process, which lives on after its
	// read fails (a dd would exit, and a caller that is gone counts as
	// killed).
	tids, errs, release := make(chan int, 1), make(chan error, 1), make(chan struct{})
	defer close(release)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- syscall.Gettid()
		_, err := f.ReadAt(make([]byte, 1<<20), 0)
		errs <- err
		<-release
	}()
	tid := <-tids
	time.Sleep(300 * time.Millisecond) // inside its read, which waits for the stalled GET
	// SIGURG: the Go runtime's own preemption signal, which it handles.
	if err := syscall.Tgkill(os.Getpid(), tid, syscall.SIGURG); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-errs:
		t.Fatalf("the read ended before the abort: %v", err)
	default:
	}
	aborted := time.Now()
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err == nil {
		t.Fatal("a read through an aborted mount got no error")
	}
	f.Close() // else the mount is busy
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(aborted)
	t.Logf("unmounted %v after the abort", took)
	if took > stallGuard/2 {
		t.Fatalf("unmounting an aborted mount took %v: the read its reader's signal had left going waited for the store", took)
	}
	if e := eintr() - e0; e != 1 {
		t.Fatalf("%v reads ended with EINTR, want the one the abort cancelled", e)
	}
}

// requireFusectl skips the test unless FUSE connections can be aborted
// through /sys/fs/fuse/connections (the fusectl filesystem, which root may
// mount there).
func requireFusectl(t *testing.T) {
	t.Helper()
	testenv.RequireFUSE(t)
	const fusectlMagic = 0x65735543 // FUSE_CTL_SUPER_MAGIC
	var fs unix.Statfs_t
	if unix.Statfs("/sys/fs/fuse/connections", &fs) == nil && fs.Type == fusectlMagic {
		return
	}
	if err := unix.Mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, ""); err != nil {
		t.Skipf("no fusectl at /sys/fs/fuse/connections: %v", err)
	}
}

// inRead reports whether process pid is inside read(2) of the file at path.
func inRead(pid int, path string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	f := strings.Fields(string(b))
	if err != nil || len(f) < 2 || f[0] != strconv.Itoa(syscall.SYS_READ) {
		return false
	}
	fd, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 31)
	if err != nil {
		return false
	}
	target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	return err == nil && target == path
}

// waitUntil polls cond until it holds, failing the test after a deadline
// generous enough for a busy machine.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, still waiting for %s", what)
		}
	}
}
