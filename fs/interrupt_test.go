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
func testRawFS(t testing.TB) *rawFS { return newRawFS(nil, nil, t.TempDir()) }

// A signal the caller handles (its INTERRUPT) does not cancel the request;
// the watch leaves when the request returns.
func TestInterruptOfACallerNotKilledDoesNotCancel(t *testing.T) {
	r := testRawFS(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	kernel := make(chan struct{})
	g := r.guard(kernel, fuse.Caller{Pid: uint32(syscall.Gettid())})
	close(kernel)
	time.Sleep(scanInterval + killWatchInterval + killWatchInterval/2)
	if closed(g.cancel) {
		t.Fatal("an INTERRUPT of a caller not being killed cancelled its request")
	}
	g.end()
	if g.done == nil {
		t.Fatalf("no watch of the interrupted request %v after its INTERRUPT", scanInterval+killWatchInterval)
	}
}

// An INTERRUPT of a caller that is gone (as a killed one soon is) cancels
// the request within a scan.
func TestInterruptOfACallerGoneCancels(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := fuse.Caller{Pid: uint32(cmd.Process.Pid)} // reaped
	r := testRawFS(t)
	kernel := make(chan struct{})
	g := r.guard(kernel, gone)
	other := r.guard(make(chan struct{}), gone) // in flight, not interrupted
	time.Sleep(scanInterval + scanInterval/2)   // a scan or so before
	close(kernel)
	select {
	case <-g.cancel:
	case <-time.After(5 * scanInterval):
		t.Fatal("interrupt of a caller that is gone: request not cancelled")
	}
	if closed(other.cancel) {
		t.Fatal("a request not interrupted was cancelled")
	}
	g.end()
	other.end()
}

// The scan stops once no request is in flight.
func TestScanStopsWhenIdle(t *testing.T) {
	r := testRawFS(t)
	r.guard(make(chan struct{}), fuse.Caller{Pid: uint32(os.Getpid())}).end()
	time.Sleep(4 * scanInterval)
	r.inflight.mu.Lock()
	defer r.inflight.mu.Unlock()
	if r.inflight.armed || r.inflight.head != nil {
		t.Fatalf("scan armed %v, list %v, with no request in flight", r.inflight.armed, r.inflight.head)
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

// BenchmarkGuard is what every guarded request pays that no INTERRUPT
// reaches.
func BenchmarkGuard(b *testing.B) {
	r := testRawFS(b)
	kernel := make(chan struct{})
	for b.Loop() {
		r.guard(kernel, fuse.Caller{}).end()
	}
}
