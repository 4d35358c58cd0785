//go:build linux

package hoststandin

import "golang.org/x/sys/unix"

// openat2Beneath opens rel beneath the directory dirfd with no symlink at
// any component (ELOOP) and nothing that leads out of it (EXDEV).
func openat2Beneath(dirfd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		// EAGAIN: a rename elsewhere raced the lookup; EINTR: a signal.
		if (err != unix.EAGAIN && err != unix.EINTR) || try == 8 {
			return fd, err
		}
	}
}

// openat2Works says whether openat2 resolves beneath dirfd here: kernels
// before 5.6 answer ENOSYS, and some seccomp filters refuse it (EPERM).
func openat2Works(dirfd int) bool {
	fd, err := openat2Beneath(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
