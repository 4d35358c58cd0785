//go:build !linux

package hoststandin

import "golang.org/x/sys/unix"

// Without openat2, names are resolved one component at a time.
func openat2Beneath(int, string, int) (int, error) { return -1, unix.ENOSYS }

func openat2Works(int) bool { return false }
