package rdmaread

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/internal/errno"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
)

// Errors leave the engine with the errno the read ioctl answers
// (docs/ioctl.md); the store's keep theirs.
func TestReadErrorsCarryTheIoctlsErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{fmt.Errorf("%w: negative offset", abi.ErrInvalid), syscall.EINVAL},
		{cufile.ErrNoDriver, syscall.ENODEV},
		{cufile.ErrNoDevice, syscall.ENODEV},
		{fmt.Errorf("import: %w", cufile.ErrBadHandle), syscall.EBADF},
		{mint.ErrOutOfBounds, syscall.ERANGE},
		{cufile.ErrOutOfRange, syscall.ERANGE},
		{ErrNoRDMA, syscall.ECANCELED},
		{fmt.Errorf("%w: server_501", ErrDeclined), syscall.ECANCELED},
		{context.Canceled, syscall.EINTR},
		{fmt.Errorf("get: %w", objstore.ErrNotFound), syscall.ENOENT},
		{objstore.ErrChanged, syscall.ESTALE},
		{objstore.ErrAccessDenied, syscall.EACCES},
		{context.DeadlineExceeded, syscall.EIO},
		{objstore.ErrNoBucket, syscall.EIO},
		{syscall.ECONNRESET, syscall.EIO},
		{errors.New("copy failed"), syscall.EIO},
	} {
		code, ok := errno.Of(IoctlError(tc.err))
		if !ok || code != tc.want {
			t.Errorf("%v: errno %v, want %v", tc.err, code, tc.want)
		}
	}
	if IoctlError(nil) != nil {
		t.Error("no error became one")
	}
}
