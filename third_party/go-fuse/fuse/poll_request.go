// s3gdsfs patch (PATCHES.md): MountOptions.PollRequests.

package fuse

import "sync/atomic"

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
	// came before it was handled and were answered EAGAIN, which makes
	// the kernel send them again at once.
	InterruptsFound, InterruptsRequeued uint64
}

type requestWaitCounts struct{ polled, slept, blocked atomic.Uint64 }

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
		InterruptsFound: ms.interruptsFound.Load(), InterruptsRequeued: ms.interruptsRequeued.Load()}
}
