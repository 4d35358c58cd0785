// Package s3gds reads s3gdsfs files into CUDA memory, and writes them from
// it, from Go: it issues the S3GDS_IOC_READ and S3GDS_IOC_WRITE ioctls (see
// package abi and docs/ioctl.md) and reads the daemon's extended attributes.
package s3gds

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/abi"
)

// Result is how a read was carried.
type Result struct {
	Bytes     uint64 // delivered; short at the end of the object
	RDMABytes uint64 // of Bytes, over RDMA
	HTTPBytes uint64 // of Bytes, over HTTP
	Transport abi.Transport
	Decline   abi.Decline // why RDMA did not carry every byte; DeclineNone when it did or was not wanted
	Elapsed   time.Duration
}

// Read asks the daemon to deliver req.Length bytes of f from req.Offset into
// the destination req names. It fills in req.Size and req.Version, and on
// success the out fields of req as well. An error from the daemon is an
// *fs.PathError wrapping the errno: errors.Is(err, unix.ERANGE).
func Read(f *os.File, req *abi.ReadRequest) (Result, error) {
	return call(f, abi.IocRead, "ioctl S3GDS_IOC_READ", req)
}

// Write asks the daemon to write req.Length bytes of the buffer req names,
// from req.DstOffset, at file offset req.Offset of f, a file open for
// writing on a mount with --allow-writes. Writes are in order: req.Offset
// must be the bytes written so far (EINVAL otherwise). Like write(2) it may
// be short: Result.Bytes says how many bytes were taken, and the call for
// the rest meets the error that cut it. The object appears when f closes.
func Write(f *os.File, req *abi.ReadRequest) (Result, error) {
	return call(f, abi.IocWrite, "ioctl S3GDS_IOC_WRITE", req)
}

func call(f *os.File, cmd uint32, op string, req *abi.ReadRequest) (Result, error) {
	req.Size, req.Version = abi.Size, abi.Version
	buf := req.Encode()
	conn, err := f.SyscallConn()
	if err != nil {
		return Result{}, err
	}
	var errno unix.Errno
	err = conn.Control(func(fd uintptr) {
		for {
			_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
			// The daemon answers EINTR when a signal (Go's preemption among
			// them) interrupted the request before it took any byte; the
			// call is safe to repeat.
			if errno != unix.EINTR {
				return
			}
		}
	})
	if err != nil {
		return Result{}, err
	}
	if errno != 0 {
		return Result{}, &fs.PathError{Op: op, Path: f.Name(), Err: errno}
	}
	if err := req.UnmarshalBinary(buf); err != nil {
		return Result{}, err
	}
	return Result{
		Bytes:     req.Bytes,
		RDMABytes: req.RDMABytes,
		HTTPBytes: req.HTTPBytes,
		Transport: req.Transport,
		Decline:   req.Decline,
		Elapsed:   time.Duration(req.ElapsedNs),
	}, nil
}

// Caps reads what the daemon serving path can do; ask it on the mount root.
func Caps(path string) (abi.Caps, error) {
	var caps abi.Caps
	value, err := getxattr(path, abi.XattrCaps)
	if err != nil {
		return caps, err
	}
	if err := json.Unmarshal(value, &caps); err != nil {
		return caps, fmt.Errorf("%s on %s: %w", abi.XattrCaps, path, err)
	}
	return caps, nil
}

// ETag reads the ETag of the object behind a file.
func ETag(path string) (string, error) {
	value, err := getxattr(path, abi.XattrETag)
	return string(value), err
}

// Stats reads the daemon's statistics for path as JSON: on the mount root a
// snapshot of its metrics, on a file what it knows of the object behind it
// (docs/ioctl.md). Numbers decode as float64, nested objects as map[string]any.
func Stats(path string) (map[string]any, error) {
	value, err := getxattr(path, abi.XattrStats)
	if err != nil {
		return nil, err
	}
	var stats map[string]any
	if err := json.Unmarshal(value, &stats); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", abi.XattrStats, path, err)
	}
	return stats, nil
}

// getxattr reads a whole attribute whose size may change between calls
// (counters grow).
func getxattr(path, name string) ([]byte, error) {
	for {
		size, err := unix.Getxattr(path, name, nil)
		if err != nil {
			return nil, &fs.PathError{Op: "getxattr " + name, Path: path, Err: err}
		}
		buf := make([]byte, size+256)
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "getxattr " + name, Path: path, Err: err}
		}
		return buf[:n], nil
	}
}
