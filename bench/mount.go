package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/mountinfo"
)

const (
	mountWait   = 60 * time.Second // for the daemon to show the objects
	unmountWait = 20 * time.Second // for the daemon to exit after SIGINT
)

// mountSpec says how to run one FUSE daemon in the foreground.
type mountSpec struct {
	name       string
	argv       []string
	env        []string // added to this process's environment
	mountpoint string
	logPath    string
}

// mount is a running FUSE daemon whose mountpoint shows the objects.
type mount struct {
	spec   mountSpec
	cmd    *exec.Cmd
	exited chan struct{}
	// root is the directory holding the objects: the mountpoint itself, or
	// mountpoint/bucket for filesystems that list buckets at the top.
	root string
}

// startMount runs the daemon and waits until the mount shows every object
// of ready at its size.
func startMount(ctx context.Context, spec mountSpec, ready []object) (*mount, error) {
	if isMounted(spec.mountpoint) {
		return nil, fmt.Errorf("%s is already a mountpoint", spec.mountpoint)
	}
	logFile, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	fmt.Fprintf(logFile, "=== %s %s\n", time.Now().Format(time.RFC3339), strings.Join(spec.argv, " "))

	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Env = append(daemonEnviron(), spec.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // our Ctrl-C handler decides when it unmounts
		Pdeathsig: syscall.SIGTERM, // unmount if the benchmark dies
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.argv[0], err)
	}
	m := &mount{spec: spec, cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(m.exited)
	}()
	if err := m.waitForObjects(ctx, ready); err != nil {
		m.unmount()
		return nil, fmt.Errorf("%w\n%s log (%s), last lines:\n%s", err, spec.name, spec.logPath, logTail(spec.logPath))
	}
	return m, nil
}

// waitForObjects polls until the mount lists every object at its size.
// Each check runs aside so a hung daemon cannot block the deadline.
func (m *mount) waitForObjects(ctx context.Context, ready []object) error {
	deadline := time.After(mountWait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		found := make(chan string, 1)
		go func() { found <- m.findRoot(ready) }()
		select {
		case root := <-found:
			if root != "" {
				m.root = root
				return nil
			}
		case <-m.exited:
			return fmt.Errorf("%s exited before the mount was ready (%v)", m.spec.name, m.cmd.ProcessState)
		case <-deadline:
			return fmt.Errorf("%s did not show the objects under %s within %v", m.spec.name, m.spec.mountpoint, mountWait)
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-m.exited:
			return fmt.Errorf("%s exited before the mount was ready (%v)", m.spec.name, m.cmd.ProcessState)
		case <-deadline:
			return fmt.Errorf("%s did not show the objects under %s within %v", m.spec.name, m.spec.mountpoint, mountWait)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (m *mount) findRoot(ready []object) string {
	if !isMounted(m.spec.mountpoint) {
		return ""
	}
	for _, root := range []string{m.spec.mountpoint, filepath.Join(m.spec.mountpoint, bucketName)} {
		complete := true
		for _, o := range ready {
			fi, err := os.Stat(filepath.Join(root, o.Key))
			if err != nil || fi.Size() != o.Size {
				complete = false
				break
			}
		}
		if complete {
			return root
		}
	}
	return ""
}

func (m *mount) path(o object) string { return filepath.Join(m.root, o.Key) }

// unmount asks the daemon to unmount with SIGINT, as Ctrl-C would, and
// falls back to fusermount3 -u, then a lazy umount, then SIGKILL.
func (m *mount) unmount() {
	if m.running() {
		m.cmd.Process.Signal(os.Interrupt)
		select {
		case <-m.exited:
		case <-time.After(unmountWait):
			progress("%s: no exit %v after SIGINT; unmounting by hand", m.spec.name, unmountWait)
		}
	}
	m.forceUnmount()
	if m.running() {
		m.cmd.Process.Kill()
		<-m.exited
	}
}

// kill stops a hung daemon at once so reads blocked in the mount return.
func (m *mount) kill() {
	if m.running() {
		m.cmd.Process.Kill()
	}
	m.forceUnmount()
}

// alive reports whether the daemon still runs and its mount is in place.
func (m *mount) alive() bool {
	return m != nil && m.running() && isMounted(m.spec.mountpoint)
}

func (m *mount) running() bool {
	select {
	case <-m.exited:
		return false
	default:
		return m.cmd.Process != nil
	}
}

func (m *mount) forceUnmount() {
	mp := m.spec.mountpoint
	if !isMounted(mp) {
		return
	}
	if out, err := exec.Command("fusermount3", "-u", mp).CombinedOutput(); err == nil {
		return
	} else {
		progress("%s: fusermount3 -u: %v %s", m.spec.name, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("umount", "-l", mp).CombinedOutput(); err != nil {
		progress("%s: umount -l: %v %s", m.spec.name, err, strings.TrimSpace(string(out)))
	}
}

// daemonEnviron is this process's environment without the AWS_* and
// RCLONE_* settings a developer machine may carry (a CA bundle, a profile,
// another endpoint): every daemon must see only the benchmark's server.
// rclone, for one, refuses to start when AWS_CA_BUNDLE is set.
func daemonEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "RCLONE_") {
			env = append(env, kv)
		}
	}
	return env
}

// isMounted reports whether dir is a mountpoint, per /proc/self/mountinfo.
func isMounted(dir string) bool {
	mounted, _ := mountsUnder(dir)
	for _, mp := range mounted {
		if mp == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// mountsUnder lists mountpoints at or below dir.
func mountsUnder(dir string) ([]string, error) {
	all, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var found []string
	for _, m := range all {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			found = append(found, m.Point)
		}
	}
	return found, nil
}

// removeUnlessMounted deletes dir, but never recurses into a live mount:
// that would delete objects through the filesystem.
func removeUnlessMounted(dir string) error {
	mounted, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mounted) > 0 {
		return fmt.Errorf("left %s in place: still mounted: %s", dir, strings.Join(mounted, ", "))
	}
	return os.RemoveAll(dir)
}

func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const keep = 4 << 10
	if len(data) > keep {
		data = data[len(data)-keep:]
	}
	return string(data)
}
