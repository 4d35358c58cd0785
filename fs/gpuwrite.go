package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

var _ gofs.FileIoctler = (*writeHandle)(nil)

// Ioctl serves S3GDS_IOC_WRITE on a file open for writing: the caller's
// device buffer is copied to pinned staging and written into the file's
// upload as write(2) writes it, at the offset where the last write ended
// (docs/ioctl.md). A read ioctl on it is EBADF: the file is not open for
// reading.
func (h *writeHandle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	switch cmd {
	case abi.IocWrite:
	case abi.IocRead:
		return 0, syscall.EBADF
	default:
		return 0, syscall.ENOTTY
	}
	start := time.Now()
	m := h.node.mount
	req, err := abi.Decode(input)
	if err != nil {
		m.core.Logger().Debug("GPU write refused", "err", err)
		return 0, syscall.EINVAL
	}
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return 0, syscall.EINVAL
	}
	if m.gpu == nil {
		return 0, syscall.ENODEV
	}
	if req.Offset > 1<<62 {
		return 0, errno(vfs.ErrNotAppend)
	}
	off := int64(req.Offset)
	var n int64
	if req.Length == 0 {
		// Nothing to copy, but the offset is checked as a write's is.
		_, err = h.u.WriteFrom(ctx, off, nil, vfs.WriteGPUHTTP)
	} else {
		n, err = m.callers.Write(ctx, h, int(caller.Pid), caller.Uid, req, func(p []byte) (int, error) {
			k, err := h.u.WriteFrom(ctx, off, p, vfs.WriteGPUHTTP)
			off += int64(k)
			return k, err
		})
	}
	if err != nil {
		e := h.u.Entry()
		m.core.Logger().Debug("GPU write failed", "bucket", e.Bucket, "key", e.Key, "offset", req.Offset,
			"length", req.Length, "written", n, "pid", caller.Pid, "err", err)
		if n == 0 {
			return 0, errno(err)
		}
		// A short write, as write(2) has: the next call meets the error.
	}
	if n > 0 {
		// The kernel sizes a file by the writes it passes on, and it saw
		// none of these: drop its attributes, so that stat, and a read
		// after the close, ask the daemon for the size.
		h.node.NotifyContent(-1, 0)
	}
	req.Bytes = uint64(n)
	req.HTTPBytes = uint64(n)
	req.RDMABytes = 0
	req.Decline = abi.DeclineNone
	req.Transport = abi.TransportNone
	if n > 0 {
		req.Transport = abi.TransportHTTP
	}
	req.ElapsedNs = uint64(time.Since(start).Nanoseconds())
	copy(output, req.Encode())
	return 0, 0
}
