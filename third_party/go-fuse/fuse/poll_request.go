// s3gdsfs patch (PATCHES.md): MountOptions.PollRequests.

package fuse

import (
	"sync"
	"sync/atomic"
)

// RequestWaits counts the requests read from the device by how the
// reading goroutine waited for them.
type RequestWaits struct {
	// Polled were found while polling (PollRequests), no thread woken.
	Polled uint64
	// Slept came after the goroutine slept in ppoll(2).
	Slept uint64
	// Blocked were read with a blocking read(2) (no PollRequests).
	Blocked uint64
	// InterruptsFound are INTERRUPT requests (a signal to a caller
	// inside a request) that found their request; InterruptsRequeued
	// did not find it in time and were answered EAGAIN, which makes
	// the kernel send them again at once.
	InterruptsFound, InterruptsRequeued uint64
	// WokenBesidePollers are goroutines woken from ppoll(2) by a request
	// while another goroutine polled the device: a wake-up not needed,
	// which the caller that sent the request paid inside its syscall.
	WokenBesidePollers uint64
}

type requestWaitCounts struct{ polled, slept, blocked, wokenBesidePollers atomic.Uint64 }

// note counts a request read in c, if the read got one.
func (w *requestWaitCounts) note(c *atomic.Uint64, n int, err error) {
	if err == nil && n > 0 {
		c.Add(1)
	}
}

// RequestWaits says how the server's goroutines waited for the requests
// they read so far.
func (ms *Server) RequestWaits() RequestWaits {
	w := &ms.fuseFD.waits
	return RequestWaits{Polled: w.polled.Load(), Slept: w.slept.Load(), Blocked: w.blocked.Load(),
		InterruptsFound: ms.interruptsFound.Load(), InterruptsRequeued: ms.interruptsRequeued.Load(),
		WokenBesidePollers: w.wokenBesidePollers.Load()}
}

// deviceWatch says who watches the device for requests when
// PollRequests is set: goroutines polling it (at most maxPollers), one
// asleep in ppoll(2) when none polls, and the others waiting inside the
// process for a turn (Linux only; see readDevice).
type deviceWatch struct {
	mu       sync.Mutex
	polling  int  // goroutines polling the device
	sleeping bool // one goroutine is in ppoll(2)
	waiting  int  // goroutines waiting for a turn
	turns    int  // turns given to waiters and not yet taken
	turn     sync.Cond
}
