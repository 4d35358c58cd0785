package fs

import (
	"context"
	"errors"
	"syscall"

	carried "github.com/s3gdsfs/s3gdsfs/internal/errno"
)

// errno is the one place errors become FUSE answers: the errno an error
// carries from where it was made (internal/errno: the store's ENOENT,
// EACCES and ESTALE, the block memory's ENOMEM, the core's ENOTDIR, the
// GPU engine's), EINTR for a read the caller's interrupt cancelled, EIO
// for anything else.
func errno(err error) syscall.Errno {
	// Only an errno returned as such passes through: one found deeper in
	// the chain comes from the S3 connection (ECONNRESET, ECONNREFUSED,
	// ...) and means nothing about the file, so it is EIO.
	en, bare := err.(syscall.Errno)
	switch {
	case err == nil:
		return 0
	case bare:
		return en
	}
	if code, ok := carried.Of(err); ok {
		return code
	}
	if errors.Is(err, context.Canceled) {
		return syscall.EINTR
	}
	return syscall.EIO
}

// errnoName is an answer's label in the error counters: a bounded set,
// EIO for the rest.
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EACCES:
		return "EACCES"
	case syscall.ESTALE:
		return "ESTALE"
	case syscall.EINTR:
		return "EINTR"
	case syscall.ENOMEM:
		return "ENOMEM"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.ENODEV:
		return "ENODEV"
	case syscall.EBADF:
		return "EBADF"
	case syscall.ERANGE:
		return "ERANGE"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	case syscall.ECANCELED:
		return "ECANCELED"
	}
	return "EIO"
}
