package fs

import (
	"fmt"

	"github.com/hanwen/go-fuse/v2/splice"

	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// SpliceUsable says whether replies of up to maxRead bytes can be spliced
// (--splice): the kernel must let this process make pipes of
// vfs.ReplyPipeSize(maxRead), and go-fuse, which
// reads fs.pipe-max-size once when the program starts and grows no pipe
// beyond it, must have seen it large enough then (a limit raised later
// helps only a new process).
func SpliceUsable(maxRead int) error {
	if err := vfs.SpliceUsable(maxRead); err != nil {
		return err
	}
	if need := vfs.ReplyPipeSize(maxRead); !splice.Resizable() || splice.MaxPipeSize() < need {
		return fmt.Errorf("fs.pipe-max-size was %d when this process started, below the %d a spliced reply needs (raise it before starting: `sysctl fs.pipe-max-size=%d`)",
			splice.MaxPipeSize(), need, vfs.WantPipeMaxSize(maxRead))
	}
	return nil
}
