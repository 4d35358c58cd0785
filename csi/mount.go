package csi

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/s3gdsfs/s3gdsfs/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// isMountPoint says whether path is a mount point of this mount namespace.
// It reads mountinfo rather than comparing stat's devices: a mount whose
// daemon died answers stat with ENOTCONN.
func isMountPoint(path string) (bool, error) {
	at, err := mountinfo.At(filepath.Clean(path))
	return len(at) > 0, err
}

// bindMount mounts src at dst (made if missing), read-only if asked:
// a bind mount takes MS_RDONLY only on a remount.
func bindMount(src, dst string, readOnly bool) error {
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind mount " + src + " at", Path: dst, Err: err}
	}
	if readOnly {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			unix.Unmount(dst, unix.MNT_DETACH)
			return &os.PathError{Op: "remount read-only", Path: dst, Err: err}
		}
	}
	return nil
}

// unmountAll takes every mount off path (a path may hold stacked mounts),
// busy ones lazily.
func unmountAll(path string) error {
	for {
		mounted, err := isMountPoint(path)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(path, 0); err != nil {
			if !errors.Is(err, unix.EBUSY) {
				return &os.PathError{Op: "unmount", Path: path, Err: err}
			}
			if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
				return &os.PathError{Op: "unmount", Path: path, Err: err}
			}
		}
	}
}

// detach lazily takes every mount off path, for mounts whose daemon is
// gone; errors are of no use then.
func detach(path string) {
	for {
		if mounted, err := isMountPoint(path); err != nil || !mounted {
			return
		}
		if unix.Unmount(path, unix.MNT_DETACH) != nil {
			return
		}
	}
}
