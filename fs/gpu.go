package fs

import (
	"context"
	"encoding/json"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/abi"
)

var _ gofs.FileIoctler = (*fileHandle)(nil)

// Ioctl serves S3GDS_IOC_READ: the caller's device buffer is filled from
// the object version this handle pinned at open (docs/ioctl.md).
func (fh *fileHandle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	if cmd != abi.IocRead {
		return 0, syscall.ENOTTY
	}
	m := fh.mount
	req, err := abi.Decode(input)
	if err != nil {
		m.core.Logger().Debug("GPU read refused", "err", err)
		return 0, m.gpuFail(syscall.EINVAL)
	}
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return 0, m.gpuFail(syscall.EINVAL)
	}
	if !m.mayRead(caller.Uid, caller.Gid) {
		return 0, m.gpuFail(syscall.EACCES)
	}
	if m.gpu == nil {
		return 0, m.gpuFail(syscall.ENODEV)
	}
	e := fh.node.getEntry()
	res, err := m.callers.Read(ctx, fh, int(caller.Pid), req, e.Bucket, e.Key, fh.h.Version())
	if err != nil {
		en := errno(err)
		m.core.Logger().Debug("GPU read failed", "bucket", e.Bucket, "key", e.Key, "offset", req.Offset,
			"length", req.Length, "device", req.Device, "pid", caller.Pid, "errno", en.Error(), "err", err)
		return 0, m.gpuFail(en)
	}
	fh.node.stats.gpu(res)
	req.Bytes = uint64(res.Bytes)
	req.RDMABytes = uint64(res.RDMABytes)
	req.HTTPBytes = uint64(res.HTTPBytes)
	req.Transport = res.Transport
	req.Decline = res.Decline
	req.ElapsedNs = uint64(res.Elapsed.Nanoseconds())
	copy(output, req.Encode())
	return 0, 0
}

func (m *mount) gpuFail(en syscall.Errno) syscall.Errno {
	m.m.GPUReadErrors.WithLabelValues(errnoName(en)).Inc()
	return en
}

// mayRead applies the file's mode to the caller, as the kernel did at open:
// a descriptor handed to another process must not carry reads past it.
func (m *mount) mayRead(uid, gid uint32) bool {
	mode := m.opts.FileMode
	switch {
	case uid == 0:
		return true
	case uid == m.opts.UID:
		return mode&0o400 != 0
	case gid == m.opts.GID:
		return mode&0o040 != 0
	}
	return mode&0o004 != 0
}

// caps is the JSON of the caps extended attribute.
func (m *mount) caps() []byte {
	c := abi.Caps{ABIVersion: abi.Version, CUDABackend: abi.CUDABackendNone, Devices: []abi.CapsDevice{},
		RDMA: abi.CapsRDMA{Minter: "none", Fabric: "none"}}
	if m.gpu != nil {
		c.RDMA.Minter, c.RDMA.Fabric = m.gpu.RDMAInfo()
		if devs, err := m.gpu.Backend().Devices(); err == nil {
			c.CUDAAvailable = true
			c.CUDABackend = m.gpu.Backend().Name()
			for _, d := range devs {
				c.Devices = append(c.Devices, abi.CapsDevice{Ordinal: d.Ordinal, Name: d.Name})
			}
		}
	}
	b, _ := json.Marshal(c)
	return b
}
