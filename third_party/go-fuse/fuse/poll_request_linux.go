// s3gdsfs patch (PATCHES.md): MountOptions.PollRequests.

package fuse

import (
	"syscall"
	"time"
	"unsafe"
)

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// readDevice reads one request from fd. The device is made non-blocking
// the first time (writes to it never block, so they are not affected). With PollRequests set it tries
// the read without sleeping until PollRequests has passed, then sleeps
// in ppoll(2) until the device is readable and starts over.
func (r *fuseFD) readDevice(fd int, dest []byte) (int, error) {
	poll := r.server.opts.PollRequests
	if poll <= 0 {
		return syscall.Read(fd, dest)
	}
	var err error
	r.nonblock.Do(func() { err = syscall.SetNonblock(fd, true) })
	if err != nil {
		return 0, err
	}
	var deadline time.Time
	for {
		n, err := syscall.Read(fd, dest)
		if err != syscall.EAGAIN {
			return n, err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(poll)
			continue
		}
		if now.Before(deadline) {
			continue
		}
		pfd := pollFd{fd: int32(fd), events: 0x1} // POLLIN
		_, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0)
		if e != 0 && e != syscall.EINTR {
			return 0, e
		}
		deadline = time.Time{}
	}
}
