package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireFUSE skips the test unless this process can mount FUSE
// filesystems: /dev/fuse must exist, we must be root, and a fusermount
// helper must be installed (mount libraries call it to unmount).
func RequireFUSE(t testing.TB) {
	t.Helper()
	if reason := fuseUnavailable(); reason != "" {
		t.Skip("FUSE unavailable: " + reason)
	}
}

// FUSEAvailable reports whether FUSE mounts can work here and, if not, why.
func FUSEAvailable() (ok bool, reason string) {
	reason = fuseUnavailable()
	return reason == "", reason
}

func fuseUnavailable() string {
	fi, err := os.Stat("/dev/fuse")
	if err != nil {
		return "/dev/fuse is missing (" + err.Error() + ")"
	}
	if fi.Mode()&os.ModeCharDevice == 0 {
		return "/dev/fuse is not a character device"
	}
	if os.Geteuid() != 0 {
		return "tests that mount must run as root"
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err != nil {
			return "fusermount3 not found; run `make deps` (Debian package fuse3)"
		}
	}
	return ""
}
