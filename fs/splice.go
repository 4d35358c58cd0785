package fs

import (
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// pipeResult is a reply whose bytes wait in a spliced handle's pipe
// (vfs/splice.go): go-fuse splices them on into /dev/fuse behind the
// header, so the daemon never copies them.
type pipeResult struct {
	fd, n int
	done  func()
	m     *metrics.Set
}

func (r pipeResult) Stateful() (uintptr, int) { return uintptr(r.fd), r.n }
func (r pipeResult) Size() int                { return r.n }
func (r pipeResult) Done()                    { r.done() }

// Bytes is go-fuse's way out when it could not splice: the bytes are read
// out of the pipe (TIOCINQ is FIONREAD), unless some of them have left it
// already (then the request fails rather than wait for bytes that will not
// come).
func (r pipeResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if k, err := unix.IoctlGetInt(r.fd, unix.TIOCINQ); err != nil || k < r.n {
		return nil, fuse.EIO
	}
	if len(buf) < r.n {
		buf = make([]byte, r.n)
	}
	for got := 0; got < r.n; {
		k, err := unix.Read(r.fd, buf[got:r.n])
		if err != nil || k == 0 {
			return nil, fuse.EIO
		}
		got += k
	}
	r.m.SpliceCopied.Add(float64(r.n))
	return buf[:r.n], fuse.OK
}

// SpliceUsable says whether replies can be spliced (--splice): the kernel
// must let this process make pipes of vfs.ReplyPipeSize, and go-fuse, which
// reads fs.pipe-max-size once when the program starts and grows no pipe
// beyond it, must have seen it large enough then (a limit raised later
// helps only a new process).
func SpliceUsable() error {
	if err := vfs.SpliceUsable(); err != nil {
		return err
	}
	if !splice.Resizable() || splice.MaxPipeSize() < vfs.ReplyPipeSize {
		return fmt.Errorf("fs.pipe-max-size was %d when this process started, below the %d a spliced reply needs (raise it before starting: `sysctl fs.pipe-max-size=%d`)",
			splice.MaxPipeSize(), vfs.ReplyPipeSize, vfs.WantPipeMaxSize)
	}
	return nil
}
