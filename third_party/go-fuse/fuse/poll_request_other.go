//go:build !linux

// s3gdsfs patch (PATCHES.md): MountOptions.PollRequests is Linux only.

package fuse

import "syscall"

func (r *fuseFD) readDevice(fd int, dest []byte, served bool) (int, error) {
	n, err := syscall.Read(fd, dest)
	r.waits.note(&r.waits.blocked, n, err)
	return n, err
}
