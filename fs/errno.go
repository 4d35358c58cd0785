package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// errno maps the core's errors onto what read(2) and friends may return.
func errno(err error) syscall.Errno {
	// Only an errno the core returns as such passes through: one found
	// deeper in the chain comes from the S3 connection (ECONNRESET,
	// ECONNREFUSED, ...) and means nothing about the file, so it is EIO.
	en, bare := err.(syscall.Errno)
	switch {
	case err == nil:
		return 0
	case bare:
		return en
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrNoBucket):
		return syscall.ENOENT
	case errors.Is(err, objstore.ErrAccessDenied):
		return syscall.EACCES
	case errors.Is(err, objstore.ErrChanged):
		// The object was replaced after open: the handle is stale. A new
		// open sees the new version.
		return syscall.ESTALE
	case errors.Is(err, vfs.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, cache.ErrNoMemory):
		return syscall.ENOMEM
	}
	return syscall.EIO
}
