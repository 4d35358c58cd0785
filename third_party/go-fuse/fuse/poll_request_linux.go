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
// it has not just served a request and another goroutine already polls:
// one started because every other reader was busy, or one woken from
// ppoll(2) by a request another goroutine took. Such a goroutine is
// seldom the next to be needed (the busy ones come back first), and a
// long poll of each cost four readers on 16 CPUs CPU and rate
// (docs/benchmarks.md of s3gdsfs, "Polling for requests").
const freshPollShare = 20

// readDevice reads one request from fd. Without PollRequests it is a
// plain read(2). With it, the device is made non-blocking the first time
// (writes to it never block, so they are not affected), and the goroutine
// polls: it tries the read without sleeping, yielding the CPU between
// tries, for PollRequests when it has just served a request (served) or
// when no other goroutine polls, else for PollRequests / freshPollShare.
// A reader that does 1 MiB reads one after another sends its next request
// right after it has woken to the reply, and that wake-up alone can take
// longer than 50 us on a virtual machine.
//
// A goroutine sleeps in ppoll(2) only when no other watches the device:
// none polls it and none sleeps. A request wakes every goroutine asleep in
// ppoll (poll waiters are not exclusive, as blocked read(2) callers are),
// and the wake-up is paid by the caller that sends it, inside its
// syscall; beside a polling goroutine it buys nothing. The other
// goroutines wait inside the process, and the one that stops watching
// with a request in hand, leaving none to watch, gives one of them a
// turn. At most maxPollers poll at once. A goroutine that was serving
// can still come back to poll while one sleeps; wokenBesidePollers
// counts what that costs.
func (r *fuseFD) readDevice(fd int, dest []byte, served bool) (int, error) {
	poll := r.server.opts.PollRequests
	if poll <= 0 {
		n, err := syscall.Read(fd, dest)
		r.waits.note(&r.waits.blocked, n, err)
		return n, err
	}
	w := &r.watch
	r.pollSetup.Do(func() {
		r.pollSetupErr = syscall.SetNonblock(fd, true)
		w.turn.L = &w.mu
	})
	if r.pollSetupErr != nil {
		return 0, r.pollSetupErr
	}
	w.mu.Lock()
	for {
		for w.polling >= maxPollers {
			w.waitTurn()
		}
		window := poll
		if !served && w.polling > 0 {
			window /= freshPollShare
		}
		w.polling++
		w.mu.Unlock()
		n, err, done := pollDevice(fd, dest, window)
		w.mu.Lock()
		w.polling--
		if done {
			w.handOver()
			w.mu.Unlock()
			r.waits.note(&r.waits.polled, n, err)
			return n, err
		}
		served = false
		if w.polling > 0 || w.sleeping {
			w.waitTurn() // another goroutine watches the device
			continue
		}
		w.sleeping = true
		w.mu.Unlock()
		n, err, done, woke := sleepOnDevice(fd, dest)
		w.mu.Lock()
		w.sleeping = false
		if woke && w.polling > 0 {
			// A goroutine began to poll while this one slept: the
			// wake-up was not needed, but the caller paid for it.
			r.waits.wokenBesidePollers.Add(1)
		}
		if done {
			w.handOver()
			w.mu.Unlock()
			r.waits.note(&r.waits.slept, n, err)
			return n, err
		}
		// Woken by a request that a polling goroutine took: poll again.
	}
}

// waitTurn, called with w.mu held, waits until a goroutine that stopped
// watching the device gives this one a turn.
func (w *deviceWatch) waitTurn() {
	w.waiting++
	for w.turns == 0 {
		w.turn.Wait()
	}
	w.turns--
	w.waiting--
}

// handOver, called with w.mu held by a goroutine that stops watching the
// device with a request (or an error) in hand, gives a waiting goroutine
// a turn if no other watches the device now.
func (w *deviceWatch) handOver() {
	if w.polling == 0 && !w.sleeping && w.waiting > w.turns {
		w.turns++
		w.turn.Signal()
	}
}

// pollDevice retries the read for up to window. done is false if no
// request came.
func pollDevice(fd int, dest []byte, window time.Duration) (n int, err error, done bool) {
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

// sleepOnDevice sleeps in ppoll(2) until the device is readable, unless
// a request is already there (woke is false then). done is false if the
// request that woke it was taken by another goroutine.
func sleepOnDevice(fd int, dest []byte) (n int, err error, done, woke bool) {
	if n, err := syscall.Read(fd, dest); err != syscall.EAGAIN {
		return n, err, true, false
	}
	pfd := pollFd{fd: int32(fd), events: 0x1} // POLLIN
	if _, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0); e != 0 && e != syscall.EINTR {
		return 0, e, true, true
	}
	if n, err := syscall.Read(fd, dest); err != syscall.EAGAIN {
		return n, err, true, true
	}
	return 0, nil, false, true
}
