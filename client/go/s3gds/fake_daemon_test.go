package s3gds

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3gdsfs/s3gdsfs/abi"
)

// fakeDaemon is a FUSE filesystem that answers S3GDS_IOC_READ the way
// docs/ioctl.md describes for the host stand-in backend, so the clients can be
// tested through the kernel's real ioctl path: one file, "obj", served from
// memory into host buffers under /dev/shm. A caller's RDMA token is always
// "ignored by the server", which exercises the decline reporting.
type fakeDaemon struct {
	fs.Inode
	obj *fakeObject
}

type fakeObject struct {
	fs.MemRegularFile
	mu       sync.Mutex
	gpuReads uint64
	declined map[string]uint64
}

var (
	_ = (fs.NodeOnAdder)((*fakeDaemon)(nil))
	_ = (fs.NodeGetxattrer)((*fakeDaemon)(nil))
	_ = (fs.NodeIoctler)((*fakeObject)(nil))
	_ = (fs.NodeGetxattrer)((*fakeObject)(nil))
)

const fakeETag = `"0123456789abcdef0123456789abcdef"`

func (d *fakeDaemon) OnAdd(ctx context.Context) {
	d.AddChild("obj", d.NewPersistentInode(ctx, d.obj, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

func (d *fakeDaemon) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	switch attr {
	case abi.XattrCaps:
		return xattrValue(dest, abi.Caps{
			ABIVersion:  abi.Version,
			CUDABackend: abi.CUDABackendHostStandin,
			Devices:     []abi.CapsDevice{{Ordinal: 0, Name: "host-standin"}},
			RDMA:        abi.CapsRDMA{Minter: "none", Fabric: "none"},
		})
	case abi.XattrStats:
		return d.obj.Getxattr(ctx, attr, dest)
	}
	return 0, fs.ENOATTR
}

func (o *fakeObject) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	switch attr {
	case abi.XattrETag:
		return xattrValue(dest, fakeETag)
	case abi.XattrStats:
		o.mu.Lock()
		defer o.mu.Unlock()
		return xattrValue(dest, map[string]any{"host": "fake", "gpu_reads": o.gpuReads, "declined": o.declined})
	}
	return 0, fs.ENOATTR
}

// xattrValue answers getxattr with a string as is and anything else as JSON.
func xattrValue(dest []byte, v any) (uint32, syscall.Errno) {
	value, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return 0, syscall.EIO
		}
		value = string(b)
	}
	if len(dest) == 0 { // a size query
		return uint32(len(value)), 0
	}
	if len(dest) < len(value) {
		return uint32(len(value)), syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}

func (o *fakeObject) Ioctl(ctx context.Context, f fs.FileHandle, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	if cmd != abi.IocRead {
		return 0, syscall.ENOTTY
	}
	start := time.Now()
	req, err := abi.Decode(input)
	if err != nil {
		return 0, syscall.EINVAL
	}
	if req.Flags&abi.FlagHostBuffer == 0 {
		return 0, syscall.EINVAL // a host stand-in daemon refuses CUDA handles
	}
	name := req.HostBufferName()
	if !strings.HasPrefix(name, "/dev/shm/") || strings.Contains(name, "/..") {
		return 0, syscall.EBADF
	}
	dst, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return 0, syscall.EBADF // the handle does not open
	}
	defer dst.Close()
	info, err := dst.Stat()
	if err != nil {
		return 0, syscall.EIO
	}
	extent := uint64(info.Size())
	if req.DstOffset > extent || req.Length > extent-req.DstOffset {
		return 0, syscall.ERANGE
	}

	decline := abi.DeclineNone
	if req.Token() != "" && req.Flags&abi.FlagHTTPOnly == 0 {
		decline = abi.DeclineTokenIgnored
	} else if req.Flags&abi.FlagRDMAOnly != 0 {
		decline = abi.DeclineRDMAUnavailable
	}
	if decline != abi.DeclineNone {
		o.mu.Lock()
		o.declined[decline.String()]++
		o.mu.Unlock()
		if req.Flags&(abi.FlagDeclineIsError|abi.FlagRDMAOnly) != 0 {
			return 0, syscall.ECANCELED
		}
	}

	data := o.Data
	var n uint64
	if req.Offset < uint64(len(data)) {
		n = min(req.Length, uint64(len(data))-req.Offset)
	}
	if n > 0 {
		if _, err := dst.WriteAt(data[req.Offset:req.Offset+n], int64(req.DstOffset)); err != nil {
			return 0, syscall.EIO
		}
	}
	o.mu.Lock()
	o.gpuReads++
	o.mu.Unlock()

	req.Bytes, req.HTTPBytes, req.Decline = n, n, decline
	if n > 0 {
		req.Transport = abi.TransportHTTP
	}
	req.ElapsedNs = uint64(time.Since(start))
	copy(output, req.Encode())
	return 0, 0
}

// mountFakeDaemon mounts a fakeDaemon serving content as "obj" and returns
// the mount point; it is unmounted when the test ends, failed or not.
func mountFakeDaemon(t *testing.T, content []byte) string {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	dir := t.TempDir()
	root := &fakeDaemon{obj: &fakeObject{
		MemRegularFile: fs.MemRegularFile{Data: content, Attr: fuse.Attr{Mode: 0o444}},
		declined:       map[string]uint64{},
	}}
	server, err := fs.Mount(dir, root, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true,
		FsName:      "s3gds-fake",
		Name:        "s3gds-fake",
	}})
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// newHostBuffer makes a zero-filled host stand-in buffer under /dev/shm.
func newHostBuffer(t *testing.T, size int) string {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "s3gds-go-test-*")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(f.Name())
}
