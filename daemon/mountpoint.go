package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/mountinfo"
)

// probeTimeout bounds the statfs that asks a FUSE mount found at the
// mountpoint whether its daemon is alive.
const probeTimeout = 5 * time.Second

// checkMountpoint refuses what cannot be mounted on and clears what must
// not be stacked on. A FUSE mount already there is asked with statfs,
// which the kernel always sends to its daemon (a stat of the mountpoint
// may be answered from the kernel's attribute cache for --meta-ttl after
// the daemon died): ENOTCONN is a dead mount, detached lazily with a log
// line; an answering s3gdsfs mount fails the mount, naming it.
func checkMountpoint(dir string, log *slog.Logger) error {
	if dir == "" {
		return errors.New("no mountpoint given")
	}
	for _, m := range fuseMountsAt(dir) {
		alive, err := probeFUSE(dir)
		switch {
		case alive && strings.HasPrefix(m.fsType, "fuse.s3gdsfs"):
			return fmt.Errorf("mountpoint %s: a live s3gdsfs mount (%s) is already there; unmount it first (fusermount3 -u %s) or choose another mountpoint", dir, m.source, dir)
		case alive:
			continue // another live filesystem: mounting over it is the user's choice
		case errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED):
			if uerr := detach(dir); uerr != nil {
				return fmt.Errorf("mountpoint %s: a dead FUSE mount (%s, %s) is there and detaching it failed (%v); run: fusermount3 -uz %s", dir, m.fsType, m.source, uerr, dir)
			}
			log.Warn("detached a dead FUSE mount left at the mountpoint (its daemon was gone)", "mountpoint", dir, "fstype", m.fsType, "source", m.source)
		default:
			return fmt.Errorf("mountpoint %s: the FUSE mount there (%s, %s) does not answer: %v; unmount it first: fusermount3 -uz %s", dir, m.fsType, m.source, err, dir)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) && en == syscall.ENOTCONN {
			return fmt.Errorf("mountpoint %s: a dead FUSE mount is there; run: fusermount3 -u %s", dir, dir)
		}
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mountpoint %s: not a directory", dir)
	}
	return nil
}

type mountEntry struct{ fsType, source string }

// fuseMountsAt lists the FUSE mounts whose mount point is dir, newest
// last, from /proc/self/mountinfo.
func fuseMountsAt(dir string) []mountEntry {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	// Resolve links in the parent only: the mountpoint itself may be a
	// dead mount, which answers nothing.
	if parent, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(parent, filepath.Base(abs))
	}
	at, err := mountinfo.At(abs)
	if err != nil {
		return nil
	}
	var found []mountEntry
	for _, m := range at {
		if m.FSType == "fuse" || strings.HasPrefix(m.FSType, "fuse.") {
			found = append(found, mountEntry{fsType: m.FSType, source: m.Source})
		}
	}
	return found
}

// probeFUSE asks the FUSE mount at dir for its statfs, which the kernel
// sends to the daemon every time.
func probeFUSE(dir string) (alive bool, err error) {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(dir, &st)
	}()
	select {
	case err := <-done:
		return err == nil, err
	case <-time.After(probeTimeout):
		return false, fmt.Errorf("statfs did not return within %s", probeTimeout)
	}
}

// detach unmounts dir lazily: directly as root, else through fusermount3.
func detach(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil {
		return nil
	}
	if out, ferr := exec.Command("fusermount3", "-uz", dir).CombinedOutput(); ferr == nil {
		return nil
	} else if len(out) > 0 {
		return fmt.Errorf("%v; fusermount3: %s", err, strings.TrimSpace(string(out)))
	}
	return err
}
