package vfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// pipeMaxSize bounds the pipes of a process without CAP_SYS_RESOURCE.
const pipeMaxSize = "/proc/sys/fs/pipe-max-size"

// TestMain lets the splice tests size their pipes for 1 MiB replies where
// fs.pipe-max-size is the kernel's default (1 MiB) and the tests run as
// root without CAP_SYS_RESOURCE (a container): it raises the limit to what
// the daemon raises it to at start (WantPipeMaxSize of a 4 MiB read). It
// leaves it raised: another package's tests may be splicing beside these.
func TestMain(m *testing.M) {
	if b, err := os.ReadFile(pipeMaxSize); err == nil && os.Geteuid() == 0 {
		want := WantPipeMaxSize(4 << 20)
		if cur, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && cur < want {
			if err := os.WriteFile(pipeMaxSize, []byte(strconv.Itoa(want)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "raising fs.pipe-max-size for the splice tests:", err)
			}
		}
	}
	os.Exit(m.Run())
}
