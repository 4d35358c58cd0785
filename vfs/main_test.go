package vfs

import (
	"fmt"
	"os"
	"testing"
)

// TestMain lets the splice tests size their pipes for 1 MiB replies where
// fs.pipe-max-size is the kernel's default (1 MiB) and the tests run as
// root without CAP_SYS_RESOURCE (a container): it raises the limit as the
// daemon does at start, for 4 MiB reads. It leaves it raised: another
// package's tests may be splicing beside these.
func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		if _, err := RaisePipeLimit(4 << 20); err != nil {
			fmt.Fprintln(os.Stderr, "raising fs.pipe-max-size for the splice tests:", err)
		}
	}
	os.Exit(m.Run())
}
