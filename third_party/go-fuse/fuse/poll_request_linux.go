// s3gdsfs patch (PATCHES.md): MountOptions.PollRequests.

package fuse

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// maxPollers is how many goroutines poll the device at once when
// PollRequests is set; others wait for a turn. Without a bound, every
// reader goroutine a burst of requests left behind (up to GOMAXPROCS)
// would spin.
const maxPollers = 4

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// freshPollShare is the share of PollRequests a goroutine polls for when
// it has not just served a request: one started because every other
// reader was busy, or one woken from ppoll(2) by a request another
// goroutine took. Such a goroutine is seldom the next to be needed (the
// busy ones come back first), and a long poll of each cost four readers
// on 16 CPUs CPU and rate (docs/benchmarks.md of s3gdsfs, "Polling for
// requests").
const freshPollShare = 20

// readDevice reads one request from fd. Without PollRequests it is a
// plain read(2). With it, the device is made non-blocking the first time
// (writes to it never block, so they are not affected), and the reader
// takes one of maxPollers turns to poll: it tries the read without
// sleeping, yielding the CPU between tries, for PollRequests when it has
// just served a request (served), else for PollRequests / freshPollShare.
// A reader that does 1 MiB reads one after another sends its next request
// right after it has woken to the reply, and that wake-up alone can take
// longer than 50 us on a virtual machine.
//
// Past its window the goroutine gives its polling turn back and sleeps in
// ppoll(2), but only one goroutine at a time: poll waiters are not
// exclusive, as blocked read(2) callers are, so every sleeper would wake
// for each request (a test of s3gdsfs counted 17 after a burst). The
// others wait for the sleeping turn inside the process, where they hold no
// polling turn: a goroutine that has just served a request always finds
// one free unless four others are polling. Every turn is given back as
// soon as a request is read, before it is handled.
func (r *fuseFD) readDevice(fd int, dest []byte, served bool) (int, error) {
	poll := r.server.opts.PollRequests
	if poll <= 0 {
		n, err := syscall.Read(fd, dest)
		r.waits.note(&r.waits.blocked, n, err)
		return n, err
	}
	r.pollSetup.Do(func() {
		r.pollSetupErr = syscall.SetNonblock(fd, true)
		r.pollers = make(chan struct{}, maxPollers)
		r.sleeper = make(chan struct{}, 1)
	})
	if r.pollSetupErr != nil {
		return 0, r.pollSetupErr
	}
	if !served {
		poll /= freshPollShare
	}
	for {
		if n, err, done := r.pollDevice(fd, dest, poll); done {
			r.waits.note(&r.waits.polled, n, err)
			return n, err
		}
		if n, err, done := r.sleepOnDevice(fd, dest); done {
			r.waits.note(&r.waits.slept, n, err)
			return n, err
		}
		// Woken by a request that a polling goroutine took: poll briefly
		// before sleeping again.
		poll = r.server.opts.PollRequests / freshPollShare
	}
}

// pollDevice holds a polling turn and retries the read for up to window.
// done is false if no request came.
func (r *fuseFD) pollDevice(fd int, dest []byte, window time.Duration) (n int, err error, done bool) {
	r.pollers <- struct{}{}
	defer func() { <-r.pollers }()
	var deadline time.Time // set at the first miss: a waiting request needs no clock
	for {
		n, err := syscall.Read(fd, dest)
		if err != syscall.EAGAIN {
			return n, err, true
		}
		if now := time.Now(); deadline.IsZero() {
			deadline = now.Add(window)
		} else if !now.Before(deadline) {
			return 0, nil, false
		}
		// Poll only while nothing else would run: give this P to any
		// runnable goroutine (the one handling the last request, which
		// the poller would otherwise hold off until the scheduler
		// preempts it, up to 10 ms later), and the CPU to any thread
		// waiting for it (the reader, the server).
		runtime.Gosched()
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// sleepOnDevice holds the sleeping turn, and sleeps in ppoll(2) until the
// device is readable unless a request is already there. done is false if
// the request that woke it was taken by another goroutine.
func (r *fuseFD) sleepOnDevice(fd int, dest []byte) (n int, err error, done bool) {
	r.sleeper <- struct{}{}
	defer func() { <-r.sleeper }()
	if n, err := syscall.Read(fd, dest); err != syscall.EAGAIN {
		return n, err, true
	}
	pfd := pollFd{fd: int32(fd), events: 0x1} // POLLIN
	if _, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0); e != 0 && e != syscall.EINTR {
		return 0, e, true
	}
	if n, err := syscall.Read(fd, dest); err != syscall.EAGAIN {
		return n, err, true
	}
	return 0, nil, false
}
