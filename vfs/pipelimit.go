package vfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PipeMaxSize is the sysctl that bounds the pipes of a process without
// CAP_SYS_RESOURCE.
const PipeMaxSize = "/proc/sys/fs/pipe-max-size"

// RaisePipeLimit raises fs.pipe-max-size to WantPipeMaxSize(maxRead), what
// spliced replies to FUSE reads of up to maxRead bytes need, when it is
// lower and this process may write it (root), and returns what it was; ""
// when it left it alone. go-fuse reads the limit once at start, so a
// process that raised it must start again (exec itself) to splice.
func RaisePipeLimit(maxRead int) (was string, err error) {
	want := WantPipeMaxSize(maxRead)
	old, err := os.ReadFile(PipeMaxSize)
	if err != nil {
		return "", err
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(old)))
	if err != nil || cur >= want {
		return "", err
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("fs.pipe-max-size is %d: only root may raise it to %d", cur, want)
	}
	if err := os.WriteFile(PipeMaxSize, []byte(strconv.Itoa(want)), 0o644); err != nil {
		return "", fmt.Errorf("raising fs.pipe-max-size: %w", err)
	}
	return strconv.Itoa(cur), nil
}
