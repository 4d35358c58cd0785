package rdmaread

import (
	"context"
	"errors"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
)

// IoctlError gives an error of a GPU read the errno the read ioctl answers
// it with (docs/ioctl.md), as it leaves the engine for its caller: the
// request's, the engine's and its CUDA layer's errors get theirs here, the
// store's answers about the object keep the one they carry, a cancelled
// read is EINTR and anything else EIO.
func IoctlError(err error) error {
	var code syscall.Errno
	switch {
	case err == nil:
		return nil
	case errors.Is(err, abi.ErrInvalid):
		code = syscall.EINVAL
	case errors.Is(err, cufile.ErrNoDriver), errors.Is(err, cufile.ErrNoDevice):
		code = syscall.ENODEV
	case errors.Is(err, cufile.ErrBadHandle):
		if _, ok := errno.Of(err); ok {
			return err // the host stand-in's refusals carry theirs: EPERM, ELOOP, EXDEV, EINVAL
		}
		code = syscall.EBADF
	case errors.Is(err, mint.ErrOutOfBounds), errors.Is(err, cufile.ErrOutOfRange):
		code = syscall.ERANGE
	case errors.Is(err, ErrNoRDMA), errors.Is(err, ErrDeclined):
		code = syscall.ECANCELED
	case errors.Is(err, context.Canceled):
		code = syscall.EINTR
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrChanged),
		errors.Is(err, objstore.ErrAccessDenied):
		return err // ENOENT, ESTALE, EACCES, carried from the store
	default:
		code = syscall.EIO
	}
	return errno.With(code, err)
}
