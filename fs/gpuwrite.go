package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

var _ gofs.FileIoctler = (*writeHandle)(nil)

// Ioctl serves S3GDS_IOC_WRITE on a file open for writing: the caller's
// device buffer is appended to the file's upload at the offset where the
// last write ended, whole parts as RDMA UploadParts where RDMA is on, the
// rest copied to pinned staging and written as write(2) writes it
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
	var res rdmaread.WriteResult
	if req.Length == 0 {
		// Nothing to copy, but the offset is checked as a write's is.
		_, err = h.u.WriteFrom(ctx, int64(req.Offset), nil, vfs.WriteGPUHTTP)
	} else {
		res, err = m.callers.Write(ctx, h, int(caller.Pid), caller.Uid, req, &uploadSink{ctx: ctx, u: h.u, off: int64(req.Offset)})
	}
	n := res.Bytes
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
	req.HTTPBytes = uint64(res.HTTPBytes)
	req.RDMABytes = uint64(res.RDMABytes)
	req.Decline = res.Decline
	req.Transport = res.Transport
	req.ElapsedNs = uint64(time.Since(start).Nanoseconds())
	copy(output, req.Encode())
	return 0, 0
}

// uploadSink is a file's upload as the GPU engine appends to it.
type uploadSink struct {
	ctx context.Context
	u   *vfs.Upload
	off int64 // the end of what was written
}

func (s *uploadSink) PartSize() int64 { return s.u.PartSize() }

func (s *uploadSink) Append(p []byte) (int, error) {
	k, err := s.u.WriteFrom(s.ctx, s.off, p, vfs.WriteGPUHTTP)
	s.off += int64(k)
	return k, err
}

func (s *uploadSink) AppendPart(ctx context.Context, send rdmaread.PartSender) (<-chan error, error) {
	done, err := s.u.WritePart(ctx, s.off, vfs.WriteGPURDMA, vfs.WriteGPUHTTP,
		func(ctx context.Context, p *vfs.RemotePart) (vfs.CompletedPart, error) {
			return send(ctx, p.PartTarget, p)
		})
	if err == nil {
		s.off += s.u.PartSize()
	}
	return done, err
}
