// s3gdsfs patch (PATCHES.md): tests of MountOptions.PollRequests' device
// watch, on a pipe standing in for /dev/fuse (a non-blocking read of an
// empty pipe gives EAGAIN and ppoll(2) waits for it as for the device).

package fuse

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// pipeDevice is a pipe whose read end readDevice reads as the device.
type pipeDevice struct {
	r      *fuseFD
	rd, wr int
}

func newPipeDevice(t *testing.T, poll time.Duration) *pipeDevice {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(p[0]) })
	return &pipeDevice{r: &fuseFD{server: &Server{opts: &MountOptions{PollRequests: poll}}}, rd: p[0], wr: p[1]}
}

// send writes one one-byte request.
func (d *pipeDevice) send(t *testing.T, b byte) {
	t.Helper()
	if _, err := syscall.Write(d.wr, []byte{b}); err != nil {
		t.Fatal(err)
	}
}

// readers starts n goroutines that read requests as go-fuse's loop does
// (served after the first) and hand them to got, until the pipe's end.
func (d *pipeDevice) readers(n int, got chan<- byte) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			served := false
			for {
				k, err := d.r.readDevice(d.rd, buf, served)
				if err != nil || k == 0 {
					return
				}
				got <- buf[0]
				served = true
			}
		}()
	}
	return &wg
}

// state is the watch's counts now.
func (d *pipeDevice) state() (polling int, sleeping bool, waiting int) {
	w := &d.r.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polling, w.sleeping, w.waiting - w.turns
}

// waitFor polls the watch until cond holds, or fails after a second.
func (d *pipeDevice) waitFor(t *testing.T, what string, cond func(polling int, sleeping bool, waiting int) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		p, s, w := d.state()
		if cond(p, s, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: polling %d, sleeping %v, waiting %d", what, p, s, w)
		}
		time.Sleep(time.Millisecond)
	}
}

// Idle, one goroutine sleeps in ppoll and the rest wait for a turn; each
// request is read once, by whichever watches; at the pipe's end every
// goroutine leaves, each handing the turn to the next.
func TestDeviceWatchIdleHasOneSleeperAndEveryRequestIsReadOnce(t *testing.T) {
	d := newPipeDevice(t, time.Millisecond)
	got := make(chan byte, 256)
	const n = 8
	wg := d.readers(n, got)
	d.waitFor(t, "idle", func(p int, s bool, w int) bool { return p == 0 && s && w == n-1 })
	for round := 0; round < 3; round++ {
		for i := 0; i < 50; i++ {
			d.send(t, byte(i))
			if b := <-got; b != byte(i) {
				t.Fatalf("round %d: read %d, want %d", round, b, i)
			}
		}
		d.waitFor(t, "idle again", func(p int, s bool, w int) bool { return p == 0 && s && w == n-1 })
		time.Sleep(5 * time.Millisecond) // past every window
	}
	if w := &d.r.waits; w.polled.Load()+w.slept.Load() != 150 {
		t.Fatalf("%d polled + %d slept, want 150 requests", w.polled.Load(), w.slept.Load())
	}
	syscall.Close(d.wr)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p, s, w := d.state()
		t.Fatalf("readers still in readDevice after the end: polling %d, sleeping %v, waiting %d", p, s, w)
	}
}

// A goroutine whose window ends while another polls waits for a turn
// instead of sleeping in ppoll beside it, and gets the turn when the
// poller leaves with a request.
func TestDeviceWatchNoSleeperBesideAPoller(t *testing.T) {
	d := newPipeDevice(t, time.Second)
	got := make(chan byte, 4)
	poller := d.readers(1, got) // polls a whole second: nobody else polls
	d.waitFor(t, "one polling", func(p int, s bool, w int) bool { return p == 1 })
	second := d.readers(1, got) // polls a twentieth (50 ms), then waits
	d.waitFor(t, "second waiting", func(p int, s bool, w int) bool { return p == 1 && !s && w == 1 })
	d.send(t, 1)
	<-got
	// The poller left with the request and, none watching, gave the
	// waiting goroutine the turn; it polls (the first is back polling too).
	d.waitFor(t, "turn handed over", func(p int, s bool, w int) bool { return w == 0 && p >= 1 && !s })
	if n := d.r.waits.wokenBesidePollers.Load(); n != 0 {
		t.Fatalf("%d wake-ups beside a poller", n)
	}
	syscall.Close(d.wr)
	poller.Wait()
	second.Wait()
}
