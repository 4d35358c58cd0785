package daemon

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// kernelReadAhead is FUSE's readahead where the mount sets none.
const kernelReadAhead = 128 << 10

// setReadAhead raises the kernel's readahead for the mount. FUSE caps what
// a filesystem may ask for at mount time at 128 KiB; the mount's backing
// device in sysfs takes larger values, and sequential readers then reach
// the daemon in 1 MiB requests instead of 128 KiB ones. Needs root; a
// failure only costs speed.
func setReadAhead(mountpoint string, bytes int64) error {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return err
	}
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(path, []byte(strconv.FormatInt(bytes>>10, 10)), 0o644)
}
