package fs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
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
	standin := m.gpu.Backend().Name() == abi.CUDABackendHostStandin
	tokenOnly := req.IPCHandle == [abi.IPCHandleLen]byte{} && req.Token() != ""
	if hb := req.Flags&abi.FlagHostBuffer != 0; hb != standin && !tokenOnly {
		if hb {
			// Host buffers are a test aid, off unless the daemon was started with them.
			return 0, m.gpuFail(syscall.EOPNOTSUPP)
		}
		return 0, m.gpuFail(syscall.EINVAL)
	}
	owner := m.owners.tgid(int(caller.Pid))
	m.owners.add(owner, fh)

	e := fh.node.getEntry()
	res, err := m.gpu.Read(ctx, rdmaread.Request{
		Bucket: e.Bucket, Key: e.Key, Version: fh.h.Version(),
		Offset: int64(req.Offset), Length: int64(min(req.Length, 1<<62)),
		Device: int(req.Device), Handle: cufile.Handle(req.IPCHandle),
		DstOffset: req.DstOffset, Flags: req.Flags, Owner: owner, Token: req.Token(),
	})
	if err != nil {
		en := gpuErrno(err)
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

// gpuErrno maps an engine error onto the ioctl's errno (docs/ioctl.md).
func gpuErrno(err error) syscall.Errno {
	switch {
	case errors.Is(err, abi.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, cufile.ErrNoDriver), errors.Is(err, cufile.ErrNoDevice):
		return syscall.ENODEV
	case errors.Is(err, cufile.ErrBadHandle):
		return syscall.EBADF
	case errors.Is(err, rdmaread.ErrOutOfBounds), errors.Is(err, cufile.ErrOutOfRange):
		return syscall.ERANGE
	case errors.Is(err, rdmaread.ErrNoRDMA), errors.Is(err, rdmaread.ErrDeclined):
		return syscall.ECANCELED
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrChanged),
		errors.Is(err, objstore.ErrAccessDenied), errors.Is(err, context.DeadlineExceeded):
		return errno(err)
	}
	return syscall.EIO
}

// owners remembers which callers (processes) used which open files, so a
// process's imported buffers are closed when its last such file is released.
type owners struct {
	mu     sync.Mutex
	files  map[int]map[*fileHandle]struct{} // tgid -> files it read through
	tgids  map[int]int                      // thread id -> process id
	engine *rdmaread.Engine
}

func newOwners(e *rdmaread.Engine) *owners {
	return &owners{files: map[int]map[*fileHandle]struct{}{}, tgids: map[int]int{}, engine: e}
}

// tgid maps the thread FUSE names onto its process: imports belong to the
// process, whichever of its threads asked.
func (o *owners) tgid(tid int) int {
	o.mu.Lock()
	if p, ok := o.tgids[tid]; ok {
		o.mu.Unlock()
		return p
	}
	o.mu.Unlock()
	p := tid
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					p = n
				}
				break
			}
		}
	}
	o.mu.Lock()
	if len(o.tgids) > 1<<16 { // threads come and go: keep the map small
		clear(o.tgids)
	}
	o.tgids[tid] = p
	o.mu.Unlock()
	return p
}

func (o *owners) add(tgid int, fh *fileHandle) {
	o.mu.Lock()
	defer o.mu.Unlock()
	set, ok := o.files[tgid]
	if !ok {
		set = map[*fileHandle]struct{}{}
		o.files[tgid] = set
	}
	set[fh] = struct{}{}
}

// released is called when fh closes; callers left with no open file lose
// their imports.
func (o *owners) released(fh *fileHandle) {
	if o == nil {
		return
	}
	var gone []int
	o.mu.Lock()
	for tgid, set := range o.files {
		if _, ok := set[fh]; !ok {
			continue
		}
		delete(set, fh)
		if len(set) == 0 {
			delete(o.files, tgid)
			gone = append(gone, tgid)
		}
	}
	o.mu.Unlock()
	for _, tgid := range gone {
		o.engine.ReleaseOwner(tgid)
	}
}

// reap closes imports of callers that exited without closing their files
// (killed), every interval until ctx ends.
func (o *owners) reap(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o.mu.Lock()
		for tgid := range o.files {
			if !cufile.ProcessAlive(tgid) {
				delete(o.files, tgid)
			}
		}
		clear(o.tgids)
		o.mu.Unlock()
		o.engine.Reap()
	}
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
