package csi

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Launcher starts volumes' daemons: the s3gdsfs command, `s3gdsfs mount`,
// as a child of the node plugin, one per volume.
type Launcher struct {
	// Binary is the s3gdsfs command.
	Binary string
	// Flags are given to every mount before the volume's own options
	// (--memory-limit, --log-level).
	Flags []string
	// JournalDir, if set, holds a directory per volume for the uploads
	// journal of mounts with --allow-writes.
	JournalDir string
	// Output receives the daemons' log (their stderr); nil: os.Stderr.
	Output io.Writer
	// StartTimeout bounds a daemon's start (it has checked the endpoint,
	// bucket and keys when it says it is ready); 0: 2 minutes.
	StartTimeout time.Duration
	Log          *slog.Logger
}

// readyFDEnv is the command's start protocol (cmd/s3gdsfs, its
// background start): with it set, the mount says "ok" or its error as a
// line on file descriptor 3 once the mount is ready or has failed.
const readyFDEnv = "S3GDSFS_READY_FD"

// daemonProc is one running daemon.
type daemonProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // its exit status, once done
}

// args are the command line of a volume's mount: no credential is ever
// among them (they are in the environment).
func (l *Launcher) args(s MountSpec, mountpoint, journal string) []string {
	a := []string{"mount", "--endpoint", s.Endpoint, "--bucket", s.source(),
		// Pods run as any user; the file and directory modes still apply.
		"--allow-other",
		// Many daemons share the node plugin's network namespace: none
		// takes a port unless its volume asks (-o metrics-addr=...).
		"--metrics-addr", "off"}
	if s.Region != "" {
		a = append(a, "--region", s.Region)
	}
	if journal != "" {
		a = append(a, "--upload-journal", journal)
	}
	a = append(a, l.Flags...)
	for _, o := range s.Options {
		a = append(a, "-o", o)
	}
	return append(a, "--", mountpoint)
}

// childEnv is the node plugin's environment less any AWS keys of its own,
// plus the volume's.
func childEnv(c Credentials) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == readyFDEnv || k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY" || k == "AWS_SESSION_TOKEN" {
			continue
		}
		env = append(env, kv)
	}
	for _, k := range secretKeys {
		if v := c[k]; v != "" {
			env = append(env, k+"="+v)
		}
	}
	return append(env, readyFDEnv+"=3")
}

// start runs the daemon and returns once its mount is ready. A mount the
// command refused as given (exit status 2: a bad option, named in its
// message) is InvalidArgument; any other failure is Unavailable, with the
// command's message.
func (l *Launcher) start(s MountSpec, mountpoint, journal string, creds Credentials) (*daemonProc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(l.Binary, l.args(s, mountpoint, journal)...)
	cmd.Env = childEnv(creds)
	cmd.ExtraFiles = []*os.File{w}
	tail := &tailBuffer{max: 4 << 10}
	out := l.Output
	if out == nil {
		out = os.Stderr
	}
	cmd.Stdout = io.MultiWriter(tail, out)
	cmd.Stderr = cmd.Stdout
	// Its own process group: a signal to the node plugin's group (a
	// terminal's ^C) is not also one to the daemons.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, status.Errorf(codes.Internal, "starting %s: %v", l.Binary, err)
	}
	w.Close()
	p := &daemonProc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	timeout := l.StartTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var said string
	select {
	case said = <-line:
	case <-timer.C:
		cmd.Process.Kill()
		<-p.done
		return nil, status.Errorf(codes.DeadlineExceeded, "s3gdsfs mount did not become ready within %v: %s", timeout, lastLines(tail.String()))
	}
	if said == "ok" {
		l.Log.Info("daemon mounted", "pid", cmd.Process.Pid, "mountpoint", mountpoint, "bucket", s.source())
		return p, nil
	}
	<-p.done
	if said == "" {
		said = lastLines(tail.String())
	}
	code := codes.Unavailable
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && ee.ExitCode() == 2 {
		code = codes.InvalidArgument
	}
	return nil, status.Errorf(code, "s3gdsfs mount: %s", said)
}

// exited says whether the daemon has exited.
func (p *daemonProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the daemon: unmounting its mount makes it exit; a mount
// still busy is left to the daemon's own shutdown (SIGTERM: lazily
// unmounted, served until its files close), and a daemon that has not
// exited within grace is killed and its mount detached.
func (p *daemonProc) stop(mountpoint string, grace time.Duration) {
	if p.exited() {
		detach(mountpoint)
		return
	}
	if err := syscall.Unmount(mountpoint, 0); err != nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
	detach(mountpoint)
}

// tailBuffer keeps the last max bytes written, for a failed start's message.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = b.buf[len(b.buf)-b.max:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// lastLines is the end of a daemon's output, for an error message.
func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "it exited without a message"
	}
	return strings.Join(lines, "; ")
}
