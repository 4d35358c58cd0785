package fs

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// testRawFS is a rawFS whose mountpoint is a plain directory, not a mount:
// its connection is never gone.
func testRawFS(t *testing.T) *rawFS { return &rawFS{mountpoint: t.TempDir()} }

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A signal the caller handles (its INTERRUPT) does not cancel the request;
// the watch leaves when the request returns.
func TestInterruptOfACallerNotKilledDoesNotCancel(t *testing.T) {
	r := testRawFS(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	kernel := make(chan struct{})
	g := r.guard(kernel, fuse.Caller{Pid: uint32(syscall.Gettid())})
	time.Sleep(2 * watchAfter) // the watch has started
	close(kernel)
	time.Sleep(killWatchInterval + killWatchInterval/2)
	if closed(g.cancel) {
		t.Fatal("an INTERRUPT of a caller not being killed cancelled its request")
	}
	g.end()
	g.mu.Lock()
	started := g.done != nil
	g.mu.Unlock()
	if !started {
		t.Fatalf("no watch %v into the request", 2*watchAfter+killWatchInterval)
	}
}

// An INTERRUPT of a caller that is gone (as a killed one soon is) cancels
// the request at once, whether it comes before the watch starts or after.
func TestInterruptOfACallerGoneCancels(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := fuse.Caller{Pid: uint32(cmd.Process.Pid)} // reaped
	for _, early := range []bool{true, false} {
		r := testRawFS(t)
		kernel := make(chan struct{})
		if early {
			close(kernel)
		}
		g := r.guard(kernel, gone)
		if !early {
			time.Sleep(2 * watchAfter)
			close(kernel)
		}
		select {
		case <-g.cancel:
		case <-time.After(killWatchInterval):
			t.Fatalf("interrupt (before the watch: %v) of a caller that is gone: request not cancelled", early)
		}
		g.end()
	}
}

// A request that returns before watchAfter costs no watch.
func TestShortRequestHasNoWatch(t *testing.T) {
	r := testRawFS(t)
	g := r.guard(make(chan struct{}), fuse.Caller{Pid: uint32(os.Getpid())})
	g.end()
	time.Sleep(2 * watchAfter)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done != nil {
		t.Fatal("a watch started after the request returned")
	}
}

func TestCallerKilled(t *testing.T) {
	if callerKilled(uint32(os.Getpid())) {
		t.Fatal("this process counts as being killed")
	}
	// SIGKILL stays pending only for an instant (integration/kill_test.go
	// kills readers inside requests); a process reaped is gone, which
	// counts as killed.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if !callerKilled(uint32(cmd.Process.Pid)) {
		t.Fatal("a process that is gone does not count as killed")
	}
}

// A mountpoint that is not the mount (a plain directory here) gives no hold
// on a connection, which is then never gone.
func TestConnectionOfAPlainDirectory(t *testing.T) {
	r := testRawFS(t)
	c := r.openConnection()
	defer c.close()
	if c >= 0 {
		t.Fatal("a plain directory held as a FUSE connection")
	}
	if c.gone() {
		t.Fatal("no connection counts as gone")
	}
}

// BenchmarkGuard is what every guarded request pays that returns before
// its watch starts.
func BenchmarkGuard(b *testing.B) {
	r := &rawFS{mountpoint: b.TempDir()}
	kernel := make(chan struct{})
	for b.Loop() {
		r.guard(kernel, fuse.Caller{}).end()
	}
}
