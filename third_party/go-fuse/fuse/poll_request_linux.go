// s3gdsfs patch (PATCHES.md): MountOptions.PollRequests.

package fuse

import (
	"syscall"
	"time"
	"unsafe"
)

// maxPollers is how many goroutines read the device at once when
// PollRequests is set; the others wait for a turn. Without a bound, every
// reader goroutine a burst of requests left behind would poll, and all of
// those asleep in ppoll(2) would wake for each request (poll waiters are
// not exclusive, as blocked read(2) callers are).
const maxPollers = 4

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// readDevice reads one request from fd. Without PollRequests it is a
// plain read(2). With it, the device is made non-blocking the first time
// (writes to it never block, so they are not affected), and the reader
// waits for one of maxPollers turns, then tries the read without sleeping,
// yielding the CPU between tries, until PollRequests has passed, then
// sleeps in ppoll(2) until the device is readable and starts over. The turn is given back as soon as a request
// is read, before it is handled, so a poller is ready for the next one.
func (r *fuseFD) readDevice(fd int, dest []byte) (int, error) {
	poll := r.server.opts.PollRequests
	if poll <= 0 {
		n, err := syscall.Read(fd, dest)
		r.waits.note(&r.waits.blocked, n, err)
		return n, err
	}
	r.pollSetup.Do(func() {
		r.pollSetupErr = syscall.SetNonblock(fd, true)
		r.pollers = make(chan struct{}, maxPollers)
	})
	if r.pollSetupErr != nil {
		return 0, r.pollSetupErr
	}
	r.pollers <- struct{}{}
	defer func() { <-r.pollers }()
	var deadline time.Time
	counter := &r.waits.polled
	for {
		n, err := syscall.Read(fd, dest)
		if err != syscall.EAGAIN {
			r.waits.note(counter, n, err)
			return n, err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(poll)
			continue
		}
		if now.Before(deadline) {
			// Give the CPU to any thread waiting for it (the reader, the
			// server) and poll only while it would otherwise be idle.
			syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		pfd := pollFd{fd: int32(fd), events: 0x1} // POLLIN
		_, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0)
		if e != 0 && e != syscall.EINTR {
			return 0, e
		}
		deadline = time.Time{}
		counter = &r.waits.slept
	}
}
