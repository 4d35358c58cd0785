package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"strings"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/cli"
)

// helperFlags are the flags mount(8) gives a mount helper besides -o:
// "mount.fuse.s3gdsfs SOURCE MOUNTPOINT [-s] [-f] [-n] [-v] [-o OPTS]
// [-t TYPE] [-N NS]".
type helperFlags struct {
	sloppy bool // -s: unknown -o options are ignored, with a warning
	fake   bool // -f: check everything, mount nothing
}

// takeHelperFlags takes mount(8)'s helper flags out of args. -n (no
// mtab) and -v (verbose) change nothing; -t must name this filesystem.
func takeHelperFlags(args []string) ([]string, helperFlags, error) {
	var h helperFlags
	var rest []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--":
			return append(rest, args[i:]...), h, nil
		case "-o":
			rest = append(rest, args[i:min(i+2, len(args))]...)
			i++
		case "-s":
			h.sloppy = true
		case "-f":
			h.fake = true
		case "-n", "-v":
		case "-t":
			if i+1 >= len(args) {
				return nil, h, cli.Usagef("-t needs the filesystem type after it (fuse.s3gdsfs)")
			}
			i++
			if t := args[i]; t != "fuse.s3gdsfs" && t != "s3gdsfs" && t != "fuse" {
				return nil, h, cli.Usagef("-t %s: this helper mounts type fuse.s3gdsfs", t)
			}
		case "-N":
			return nil, h, cli.Usagef("-N (mount --namespace) is not supported; run the mount inside the namespace")
		default:
			rest = append(rest, a)
		}
	}
	return rest, h, nil
}

// parseMountArgs reads flags and positional arguments in any order, and
// -o key=value,... options, which are applied after the flags. In the
// helper form the first positional argument is the source.
func parseMountArgs(args []string, helperForm bool) (mountFlags, []string, error) {
	mf, positional, _, err := parseMountCommand(args, helperForm)
	return mf, positional, err
}

func parseMountCommand(args []string, helperForm bool) (mountFlags, []string, helperFlags, error) {
	var mf mountFlags
	var h helperFlags
	s := newOptionSet(&mf)
	if helperForm {
		var err error
		if args, h, err = takeHelperFlags(args); err != nil {
			return mf, nil, h, err
		}
		s.sloppy = h.sloppy
	}
	positional, lists, err := s.parse(args, os.Stdout)
	if err != nil {
		return mf, nil, h, err
	}
	if helperForm {
		// mount.fuse3 runs "s3gdsfs SOURCE MOUNTPOINT -o opts"; SOURCE may
		// name the bucket.
		mf.foreground = false
	}
	for _, l := range lists {
		if err := s.applyList(l); err != nil {
			return mf, nil, h, err
		}
	}
	if err := s.settle(); err != nil {
		return mf, nil, h, err
	}
	if helperForm && len(positional) == 2 {
		if src := positional[0]; src != "" && src != "s3gdsfs" && src != "none" && mf.bucket == "" {
			mf.bucket = src
		}
		positional = positional[1:]
	}
	return mf, positional, h, nil
}

// config is the mount's configuration, checked (daemon.Config.Validate);
// a refused setting is named by its flag.
func (mf *mountFlags) config(mountpoint string, log *slog.Logger) (daemon.Config, error) {
	if mf.S3.Endpoint == "" {
		return daemon.Config{}, cli.Usagef("--endpoint is required (or set AWS_ENDPOINT_URL)")
	}
	bucket, prefix, _ := strings.Cut(mf.bucket, "/")
	if mf.bucket != "" && bucket == "" {
		return daemon.Config{}, cli.Usagef("--bucket %q: starts with '/'; write NAME or NAME/PREFIX", mf.bucket)
	}
	if strings.Contains(prefix, "//") {
		return daemon.Config{}, cli.Usagef("--bucket %q: the prefix has an empty segment", mf.bucket)
	}
	if p := mf.FS.PollRequests; p > daemon.MaxPollRequests {
		return daemon.Config{}, cli.Usagef("--fuse-poll %s: from 0 (none) to %s", formatDuration(p), formatDuration(daemon.MaxPollRequests))
	}
	cfg := mf.Config
	cfg.Mountpoint = mountpoint
	cfg.Core.Bucket, cfg.Core.Prefix = bucket, prefix
	cfg.Core.NoStream = !mf.stream.on(mf.S3.Endpoint)
	cfg.S3.PartCRC32C = mf.writeChecksum == "crc32c"
	cfg.FS.FsName = "s3gdsfs:" + mf.bucket
	cfg.Log = log
	if err := cfg.Validate(); err != nil {
		return daemon.Config{}, named(err, true)
	}
	if mf.credentialsFile != "" {
		creds, err := credentialsFromFile(mf.credentialsFile, mf.profile)
		if err != nil {
			return daemon.Config{}, err
		}
		cfg.S3.Credentials = creds
	}
	return cfg, nil
}

// on resolves --stream for the endpoint.
func (f policyFlag) on(endpoint string) bool {
	switch f {
	case "always":
		return true
	case "never":
		return false
	}
	return daemon.NearEndpoint(endpoint)
}

// raisePipeLimit lets --splice work where the kernel's pipes are too small
// for a spliced reply: as root it raises fs.pipe-max-size (docs/operations.md)
// and, in the foreground, runs the command again in this process, since
// go-fuse read the old limit when the program started (a background child
// starts afresh anyway). Without root it leaves the limit, and the mount
// says why it does not splice.
func raisePipeLimit(mf *mountFlags, log *slog.Logger) error {
	if mf.Splice == "never" || !mf.stream.on(mf.S3.Endpoint) || !strings.HasPrefix(mf.S3.Endpoint, "http://") {
		return nil // nothing to splice: leave the limit alone
	}
	return cli.RaisePipeLimitAndRestart(log, !mf.foreground && os.Getenv(readyFDEnv) == "", mf.FS.MaxRead)
}

// readyFDEnv names the pipe on which a background child says it mounted.
const readyFDEnv = "S3GDSFS_READY_FD"

func runMount(args []string, helperForm bool) error {
	if helperForm && os.Getenv("HOME") == "" {
		// mount(8) at boot has no HOME; ~/.aws/credentials is the
		// caller's, as mount.fuse3 makes it.
		if u, err := user.Current(); err == nil && u.HomeDir != "" {
			os.Setenv("HOME", u.HomeDir)
		}
	}
	mf, positional, h, err := parseMountCommand(args, helperForm)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		if helperForm {
			return cli.Usagef("want SOURCE MOUNTPOINT -o OPTIONS, got %d arguments besides the options: %q", len(positional)+1, append([]string{"SOURCE"}, positional...))
		}
		return cli.Usagef("want exactly one MOUNTPOINT after the flags, got %d arguments: %q", len(positional), positional)
	}
	mountpoint := positional[0]
	log, err := cli.NewLogger(mf.logLevel, mf.logFile)
	if err != nil {
		return err
	}
	cfg, err := mf.config(mountpoint, log)
	if err != nil {
		return err
	}
	if h.fake {
		return nil // mount -f: the options are good; mount nothing
	}
	if err := raisePipeLimit(&mf, log); err != nil {
		return err
	}
	if !mf.foreground && os.Getenv(readyFDEnv) == "" {
		return startInBackground(args, helperForm)
	}
	d, err := daemon.Start(cfg)
	err = named(err, false)
	ready := readyPipe()
	if err != nil {
		if ready != nil {
			fmt.Fprintln(ready, err)
		}
		return err
	}
	if limit, set := d.LimitGoMemory(); set {
		log.Info("Go memory limit set from --memory-limit (GOMEMLIMIT overrides it)", "bytes", limit)
	} else {
		log.Info("Go memory limit left to GOMEMLIMIT", "bytes", limit)
	}
	if ready != nil {
		fmt.Fprintln(ready, "ok")
		ready.Close()
	} else if err := sdNotify("READY=1\nSTATUS=mounted " + mountpoint); err != nil {
		log.Warn("could not tell systemd the mount is ready ($NOTIFY_SOCKET)", "err", err)
	}
	return serveUntilSignal(d, log)
}

// serveUntilSignal serves until the mount goes away or a signal asks
// for it. The first SIGINT or SIGTERM unmounts (lazily where files are
// open) and waits, saying so, for the files still open to close, since
// their readers are served until then; a second one detaches at once and
// exits, and those readers get ENOTCONN.
func serveUntilSignal(d *daemon.Daemon, log *slog.Logger) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() { d.Wait(); close(done) }()
	select {
	case <-done:
		log.Info("unmounted from outside: exiting")
		return nil
	case s := <-sigs:
		log.Info("unmounting", "signal", s.String(), "open_files", d.OpenFiles())
		sdNotify("STOPPING=1")
	}
	unmounted := make(chan error, 1)
	go func() { unmounted <- d.Unmount() }()
	// The wait is said once, and again only when the count of open files
	// has changed.
	logged := -1
	tick := time.NewTicker(waitLogInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-unmounted:
			if err != nil {
				return err
			}
			unmounted = nil
			if logged < 0 {
				select {
				case <-done:
					log.Info("unmounted: exiting")
					return nil
				case <-time.After(100 * time.Millisecond):
				}
				logged = logWait(d, log)
			}
		case <-done:
			if logged >= 0 {
				log.Info("the last open file closed: unmounted, exiting")
			} else {
				log.Info("unmounted: exiting")
			}
			return nil
		case <-tick.C:
			// Still waiting: for the busy mount's unmount, or for the
			// files open on the detached mount to close.
			if n := d.OpenFiles(); n != logged {
				logged = logWait(d, log)
			}
		case s := <-sigs:
			log.Warn("second signal: detaching the mount and exiting; readers of files still open get ENOTCONN",
				"signal", s.String(), "open_files", d.OpenFiles())
			return d.Detach()
		}
	}
}

// waitLogInterval is how often a shutdown that waits for open files looks
// whether their count changed.
const waitLogInterval = 10 * time.Second

// logWait says what the exit waits for, and returns the count it said.
func logWait(d *daemon.Daemon, log *slog.Logger) int {
	n := d.OpenFiles()
	log.Info("waiting for the files still open on the mount to close: they are served until then, "+
		"and s3gdsfs exits when the last one closes; SIGINT or SIGTERM again exits now (their readers get ENOTCONN)",
		"open_files", n)
	return n
}

func readyPipe() *os.File {
	if os.Getenv(readyFDEnv) == "" {
		return nil
	}
	return os.NewFile(3, "ready")
}

// startInBackground re-runs the command detached from the terminal and
// returns once the child reports the mount ready, or its error.
func startInBackground(args []string, helperForm bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	if helperForm {
		// The child reads args as the helper form whatever SOURCE is
		// (a bucket may be named like a subcommand).
		cmd = exec.Command(exe, args...)
		cmd.Args[0] = "mount.fuse.s3gdsfs"
	} else {
		cmd = exec.Command(exe, append([]string{"mount"}, args...)...)
	}
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "ok" {
		return cmd.Process.Release()
	}
	cmd.Wait()
	if line == "" {
		line = "the background mount exited before it was ready (use --log-file to see why)"
	}
	return errors.New(line)
}
