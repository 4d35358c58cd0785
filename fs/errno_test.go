package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// The one mapping: an error's carried errno, wrapped or not; an errno
// returned as such; EINTR for a cancelled read; EIO for the rest, an
// errno deep in a connection's error among them.
func TestErrnoMapsWhatErrorsCarry(t *testing.T) {
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{syscall.EROFS, syscall.EROFS},
		{fmt.Errorf("x.bin: %w", vfs.ErrNotDir), syscall.ENOTDIR},
		{fmt.Errorf("read: %w", context.Canceled), syscall.EINTR},
		{fmt.Errorf("get: %w", syscall.ECONNRESET), syscall.EIO},
		{errors.New("anything else"), syscall.EIO},
	} {
		if got := errno(c.err); got != c.want {
			t.Errorf("errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
