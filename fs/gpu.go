package fs

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/abi"
)

var _ gofs.FileIoctler = (*fileHandle)(nil)

// Ioctl serves S3GDS_IOC_READ: the caller's device buffer is filled from
// the object version this handle pinned at open (docs/ioctl.md).
// S3GDS_IOC_WRITE needs a file open for writing (gpuwrite.go).
func (fh *fileHandle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	switch cmd {
	case abi.IocRead:
	case abi.IocWrite:
		if !fh.mount.core.Writable() {
			return 0, syscall.EROFS
		}
		return 0, syscall.EBADF
	default:
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
	if !m.mayRead(caller.Uid, caller.Gid, caller.Pid) {
		return 0, m.gpuFail(syscall.EACCES)
	}
	if m.gpu == nil {
		return 0, m.gpuFail(syscall.ENODEV)
	}
	e := fh.node.getEntry()
	res, err := m.callers.Read(ctx, fh, int(caller.Pid), caller.Uid, req, e.Bucket, e.Key, fh.h.Version())
	if err != nil {
		en := fh.node.readErrno(err)
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
// a descriptor handed to another process must not carry reads past it. The
// group bits apply to a caller in the file's group by its primary group or
// by a supplementary one (FUSE names only the primary: the others are read
// from /proc for the thread pid).
func (m *mount) mayRead(uid, gid, pid uint32) bool {
	mode := m.opts.FileMode
	switch {
	case uid == 0:
		return true
	case uid == m.opts.UID:
		return mode&0o400 != 0
	case gid == m.opts.GID || inGroup(pid, m.opts.GID):
		return mode&0o040 != 0
	}
	return mode&0o004 != 0
}

// inGroup reports whether the thread pid has gid among its supplementary
// groups (the Groups: line of /proc/PID/status). A thread that is gone, or
// whose status cannot be read, is in no group.
func inGroup(pid, gid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return false
	}
	return statusHasGroup(string(b), gid)
}

// statusHasGroup reports whether the Groups: line of a /proc/PID/status text
// lists gid.
func statusHasGroup(status string, gid uint32) bool {
	for _, line := range strings.Split(status, "\n") {
		v, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(v) {
			if g, err := strconv.ParseUint(f, 10, 32); err == nil && uint32(g) == gid {
				return true
			}
		}
		return false
	}
	return false
}

// caps is the JSON of the caps extended attribute.
func (m *mount) caps() []byte {
	c := abi.Caps{ABIVersion: abi.Version, CUDABackend: abi.CUDABackendNone, Devices: []abi.CapsDevice{},
		RDMA: abi.CapsRDMA{Minter: "none", Fabric: "none"}}
	if m.gpu != nil {
		c.RDMA.Minter, c.RDMA.Fabric = m.gpu.RDMAInfo()
		if devs, err := m.gpu.Backend().Devices(); err == nil {
			c.CUDABackend = m.gpu.Backend().Name()
			// The host stand-in has a device but no CUDA behind it.
			c.CUDAAvailable = c.CUDABackend != abi.CUDABackendHostStandin
			for _, d := range devs {
				c.Devices = append(c.Devices, abi.CapsDevice{Ordinal: d.Ordinal, Name: d.Name, PCIBusID: d.PCIBusID})
			}
		}
	}
	b, _ := json.Marshal(c)
	return b
}
