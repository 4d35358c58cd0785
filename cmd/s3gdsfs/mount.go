package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	s3fs "github.com/s3gdsfs/s3gdsfs/fs"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// mountFlags are the mount command's settings; each can also be given as
// -o name=value (fstab).
type mountFlags struct {
	endpoint, bucket, region, caBundle string
	virtualHost                        bool
	uid, gid                           uint
	fileMode, dirMode                  modeFlag
	allowOther                         bool
	memoryLimit, cacheSize             sizeFlag
	blockSize, partSize, readAhead     sizeFlag
	initialWindow, maxWindow           sizeFlag
	metaTTL, negativeTTL               time.Duration
	connectTimeout, readTimeout        time.Duration
	retries                            int
	stream, splice                     policyFlag
	fusePoll                           time.Duration
	streamMinRate                      sizeFlag
	streamIdle                         time.Duration
	metricsAddr                        string
	logLevel, logFile                  string
	foreground                         bool
	debugFUSE                          bool
	directIO                           directIOFlag
	directIOMinSize                    sizeFlag
	gpu, standinDir                    string
	rdma, rdmaLib                      string
	declineIsError                     bool
	gpuStreams, stagingSlots, gpuOps   int
	gpuBytes, rdmaChunk, gpuPart       sizeFlag
	stagingSlotSize                    sizeFlag
}

func newMountFlagSet(mf *mountFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("mount", flag.ContinueOnError)
	fs.StringVar(&mf.endpoint, "endpoint", os.Getenv("AWS_ENDPOINT_URL"), "S3 endpoint URL, http(s)://host[:port]; taken from $AWS_ENDPOINT_URL when the flag is not given")
	fs.StringVar(&mf.bucket, "bucket", "", "mount one bucket, or NAME/PREFIX for a prefix of it; empty mounts every bucket the credentials can list")
	fs.StringVar(&mf.region, "region", envOr("AWS_REGION", "us-east-1"), "S3 region; taken from $AWS_REGION when the flag is not given, else us-east-1")
	fs.StringVar(&mf.caBundle, "ca-bundle", "", "PEM file of CA certificates trusted beside the system store, for https endpoints")
	fs.BoolVar(&mf.virtualHost, "virtual-host", false, "virtual-hosted-style addressing (bucket.host); path-style is the default")
	fs.UintVar(&mf.uid, "uid", uint(os.Getuid()), "owner of every file and directory")
	fs.UintVar(&mf.gid, "gid", uint(os.Getgid()), "group of every file and directory")
	mf.fileMode, mf.dirMode = 0o444, 0o555
	fs.Var(&mf.fileMode, "file-mode", "permission bits of files (octal)")
	fs.Var(&mf.dirMode, "dir-mode", "permission bits of directories (octal)")
	fs.BoolVar(&mf.allowOther, "allow-other", false, "let other users use the mount (modes still apply; see docs/operations.md)")
	mf.memoryLimit, mf.cacheSize = vfs.DefaultMemoryLimit, vfs.DefaultCacheSize
	mf.blockSize, mf.partSize = vfs.DefaultBlockSize, vfs.DefaultPartSize
	mf.initialWindow, mf.maxWindow = vfs.DefaultInitialWindow, vfs.DefaultMaxWindow
	fs.Var(&mf.memoryLimit, "memory-limit", "all block memory: prefetch buffers and cache")
	fs.Var(&mf.cacheSize, "cache-size", "block cache, part of --memory-limit")
	fs.Var(&mf.blockSize, "block-size", "unit of caching and of random reads")
	mf.readAhead = daemon.DefaultReadAhead
	fs.Var(&mf.readAhead, "read-ahead", "kernel readahead for the mount (0 keeps the kernel's 128KiB; needs root)")
	fs.Var(&mf.partSize, "part-size", "bytes per ranged GET of a sequential reader")
	fs.Var(&mf.initialWindow, "initial-window", "first prefetch window of a sequential reader")
	fs.Var(&mf.maxWindow, "max-window", "largest prefetch window per open file")
	fs.DurationVar(&mf.metaTTL, "meta-ttl", vfs.DefaultMetaTTL, "how long names and sizes are cached")
	fs.DurationVar(&mf.negativeTTL, "negative-ttl", vfs.DefaultNegativeTTL, "how long a missing name is cached")
	fs.DurationVar(&mf.connectTimeout, "connect-timeout", 5*time.Second, "bound on connecting to the endpoint")
	fs.DurationVar(&mf.readTimeout, "read-timeout", vfs.DefaultReadTimeout, "a ranged GET that makes no progress this long is retried, then fails with EIO")
	fs.IntVar(&mf.retries, "retries", vfs.DefaultRetries, "times a failed ranged GET is sent again")
	mf.stream = "auto"
	fs.Var(&mf.stream, "stream", "whole-object GETs for readers that start at the beginning of an object: auto (when the endpoint is on this host or a private network), always (--stream alone) or never (parallel ranged GETs only)")
	mf.splice = "auto"
	fs.Var(&mf.splice, "splice", "move the bytes of whole-object streams for direct-I/O readers from the socket into the kernel's reply with splice(2), never through the daemon's memory: auto (with streams over http, where pipes may hold a reply), always (--splice alone; fails the mount where it cannot) or never")
	mf.streamMinRate = vfs.DefaultStreamMinRate
	fs.Var(&mf.streamMinRate, "stream-min-rate", "bytes per second a whole-object stream must deliver while reading, or parallel ranged GETs take over (0: never)")
	fs.DurationVar(&mf.streamIdle, "stream-idle", vfs.DefaultStreamIdle, "close a whole-object stream that had nothing to read this long")
	fs.DurationVar(&mf.fusePoll, "fuse-poll", defaultFusePoll(), "how long a daemon thread that has just replied polls /dev/fuse for the next FUSE request before it sleeps (threads that have not, while another polls, a twentieth of it); a request it catches skips a thread wake-up; a polling mount also fills a spliced reader's next reply ahead (0: sleep at once, no filling ahead; default 1ms with 8 CPUs or more, else 0)")
	fs.StringVar(&mf.metricsAddr, "metrics-addr", daemon.DefaultMetricsAddr, "listen address of /metrics; 'off' disables it")
	fs.StringVar(&mf.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&mf.logFile, "log-file", "", "log to this file instead of stderr")
	fs.BoolVar(&mf.foreground, "foreground", true, "stay in the foreground (the mount helper form goes to the background unless -o foreground)")
	fs.BoolVar(&mf.debugFUSE, "debug-fuse", false, "log every FUSE request")
	fs.Var(&mf.directIO, "direct-io", "page cache policy: auto (objects of at least --direct-io-min-size bypass the kernel page cache, smaller ones use it), always (--direct-io alone) or never")
	mf.directIOMinSize = s3fs.DefaultDirectIOMinSize
	fs.Var(&mf.directIOMinSize, "direct-io-min-size", "with --direct-io=auto, the smallest object read with direct I/O")
	fs.StringVar(&mf.gpu, "gpu", "auto", "GPU reads: auto (CUDA when the driver loads), off, or host-standin (a test aid: files under --host-standin-dir stand in for device memory)")
	fs.StringVar(&mf.standinDir, "host-standin-dir", "/dev/shm", "directory of host stand-in buffers, with --gpu=host-standin")
	fs.StringVar(&mf.rdma, "rdma", "off", "RDMA for GPU reads: off, loopback (an in-process emulation for tests and the demo, never a network), or libs3rdma")
	fs.StringVar(&mf.rdmaLib, "rdma-lib", "", "path of libs3rdma.so (default: the library search path)")
	fs.BoolVar(&mf.declineIsError, "rdma-decline-is-error", false, "fail GPU reads whose RDMA transfer is declined (ECANCELED) instead of falling back to HTTP")
	fs.IntVar(&mf.gpuStreams, "gpu-streams", rdmaread.DefaultStreams, "parallel ranged GETs per GPU read")
	fs.IntVar(&mf.gpuOps, "gpu-max-ops", rdmaread.DefaultMaxOps, "server operations of GPU reads in flight, across all callers")
	mf.gpuBytes, mf.rdmaChunk, mf.gpuPart = rdmaread.DefaultMaxBytes, rdmaread.DefaultRDMAChunk, rdmaread.DefaultPartSize
	fs.Var(&mf.gpuPart, "gpu-part-size", "range of one HTTP GET of a GPU read, streamed through the staging slots")
	fs.Var(&mf.gpuBytes, "gpu-max-bytes", "bytes of GPU reads in flight, across all callers")
	fs.Var(&mf.rdmaChunk, "rdma-chunk", "largest single RDMA transfer (at most 1GiB); reads are cut into such chunks so callers interleave")
	fs.IntVar(&mf.stagingSlots, "staging-slots", rdmaread.DefaultSlots, "pinned staging slots per GPU")
	mf.stagingSlotSize = rdmaread.DefaultSlotSize
	fs.Var(&mf.stagingSlotSize, "staging-slot-size", "bytes per pinned staging slot (one ranged GET)")
	return fs
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseMountArgs reads flags and positional arguments in any order, and
// -o key=value,... options.
func parseMountArgs(args []string, helperForm bool) (mountFlags, []string, error) {
	var mf mountFlags
	fs := newMountFlagSet(&mf)
	fs.SetOutput(io.Discard)
	var opts []string
	var positional []string
	for {
		// "-o" is not a flag of the set: pull it out first.
		var rest []string
		for i := 0; i < len(args); i++ {
			if args[i] == "-o" {
				if i+1 >= len(args) {
					return mf, nil, usagef("-o needs key=value,... after it")
				}
				opts = append(opts, args[i+1])
				i++
				continue
			}
			rest = append(rest, args[i])
		}
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(os.Stderr)
				fmt.Fprintln(os.Stderr, "usage: s3gdsfs mount --endpoint URL [--bucket NAME[/PREFIX]] [flags] MOUNTPOINT")
				fs.PrintDefaults()
				return mf, nil, err
			}
			return mf, nil, usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if helperForm {
		// mount.fuse3 runs "s3gdsfs SOURCE MOUNTPOINT -o opts"; SOURCE may
		// name the bucket.
		mf.foreground = false
	}
	for _, o := range opts {
		if err := applyOptions(fs, &mf, o); err != nil {
			return mf, nil, err
		}
	}
	if helperForm && len(positional) == 2 {
		if src := positional[0]; src != "s3gdsfs" && src != "none" && mf.bucket == "" {
			mf.bucket = src
		}
		positional = positional[1:]
	}
	return mf, positional, nil
}

// fstabNoise are options mount(8) and systemd pass that mean nothing here.
// "rw" is among them because mount(8) adds it by default; the mount is
// read-only whatever it says.
var fstabNoise = map[string]bool{
	"defaults": true, "rw": true, "ro": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "nofail": true, "_netdev": true, "exec": true, "noexec": true, "suid": true,
	"nosuid": true, "dev": true, "nodev": true, "async": true, "atime": true, "noatime": true,
	"relatime": true, "nodiratime": true,
}

func applyOptions(fs *flag.FlagSet, mf *mountFlags, list string) error {
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" || fstabNoise[kv] || strings.HasPrefix(kv, "x-") || strings.HasPrefix(kv, "comment=") {
			continue
		}
		key, value, hasValue := strings.Cut(kv, "=")
		key = strings.ReplaceAll(key, "_", "-")
		f := fs.Lookup(key)
		if f == nil {
			return usagef("-o %s: unknown option (options are the mount flags without dashes, e.g. -o endpoint=https://s3.example.com,bucket=data)", kv)
		}
		if !hasValue {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				value = "true"
			} else {
				return usagef("-o %s: needs a value (%s=...)", key, key)
			}
		}
		if err := fs.Set(key, value); err != nil {
			return usagef("-o %s: %v", kv, err)
		}
	}
	return nil
}

func (mf *mountFlags) config(mountpoint string, log *slog.Logger) (daemon.Config, error) {
	if mf.endpoint == "" {
		return daemon.Config{}, usagef("--endpoint is required (or set AWS_ENDPOINT_URL)")
	}
	bucket, prefix, _ := strings.Cut(mf.bucket, "/")
	if mf.bucket != "" && bucket == "" {
		return daemon.Config{}, usagef("--bucket %q: starts with '/'; write NAME or NAME/PREFIX", mf.bucket)
	}
	if strings.Contains(prefix, "//") {
		return daemon.Config{}, usagef("--bucket %q: the prefix has an empty segment", mf.bucket)
	}
	if mf.fileMode&^0o7777 != 0 || mf.dirMode&^0o7777 != 0 {
		return daemon.Config{}, usagef("--file-mode/--dir-mode: permission bits only")
	}
	if mf.retries < 0 {
		return daemon.Config{}, usagef("--retries %d: must be 0 or more", mf.retries)
	}
	if mf.fusePoll < 0 || mf.fusePoll > maxFusePoll {
		return daemon.Config{}, usagef("--fuse-poll %s: from 0 to %s", mf.fusePoll, maxFusePoll)
	}
	if mf.streamIdle <= 0 {
		return daemon.Config{}, usagef("--stream-idle %s: must be above 0", mf.streamIdle)
	}
	if mf.gpuStreams < 1 || mf.stagingSlots < 1 || mf.gpuOps < 1 {
		return daemon.Config{}, usagef("--gpu-streams, --gpu-max-ops and --staging-slots: at least 1")
	}
	if mf.directIOMinSize <= 0 {
		return daemon.Config{}, usagef("--direct-io-min-size %s: must be above 0 (--direct-io=always reads every object with direct I/O)", mf.directIOMinSize.String())
	}
	if mf.gpuPart < 1<<20 {
		return daemon.Config{}, usagef("--gpu-part-size %s: at least 1MiB", mf.gpuPart.String())
	}
	if mf.rdmaChunk < 1<<20 || mf.rdmaChunk > 1<<30 {
		return daemon.Config{}, usagef("--rdma-chunk %s: between 1MiB and 1GiB", mf.rdmaChunk.String())
	}
	if mf.stagingSlotSize < 64<<10 || mf.stagingSlotSize > 1<<30 {
		return daemon.Config{}, usagef("--staging-slot-size %s: between 64KiB and 1GiB", mf.stagingSlotSize.String())
	}
	switch mf.gpu {
	case "auto", "off", "host-standin":
	default:
		return daemon.Config{}, usagef("--gpu %q: use auto, off or host-standin", mf.gpu)
	}
	switch mf.rdma {
	case "off", "loopback", "libs3rdma":
	default:
		return daemon.Config{}, usagef("--rdma %q: use off, loopback or libs3rdma", mf.rdma)
	}
	if mf.rdma != "off" && mf.gpu == "off" {
		return daemon.Config{}, usagef("--rdma %s needs GPU reads (--gpu is off)", mf.rdma)
	}
	metrics := mf.metricsAddr
	if metrics == "off" {
		metrics = ""
	}
	return daemon.Config{
		Mountpoint: mountpoint,
		S3: objstore.Config{
			Endpoint:       mf.endpoint,
			Region:         mf.region,
			CABundle:       mf.caBundle,
			VirtualHost:    mf.virtualHost,
			ConnectTimeout: mf.connectTimeout,
			// Lookups and listings wait no longer for a reply than reads
			// wait for their bytes.
			ResponseTimeout: mf.readTimeout,
		},
		Core: vfs.Config{
			Bucket:        bucket,
			Prefix:        prefix,
			MetaTTL:       mf.metaTTL,
			NegativeTTL:   mf.negativeTTL,
			BlockSize:     int(mf.blockSize),
			PartSize:      int64(mf.partSize),
			InitialWindow: int64(mf.initialWindow),
			MaxWindow:     int64(mf.maxWindow),
			MemoryLimit:   int64(mf.memoryLimit),
			CacheSize:     zeroMeansNone(int64(mf.cacheSize)),
			ReadTimeout:   mf.readTimeout,
			Retries:       zeroMeansNone(mf.retries),
			NoStream:      !mf.stream.on(mf.endpoint),
			StreamMinRate: zeroMeansNone(int64(mf.streamMinRate)),
			StreamIdle:    mf.streamIdle,
		},
		FS: s3fs.Options{
			UID: uint32(mf.uid), GID: uint32(mf.gid),
			FileMode: uint32(mf.fileMode), DirMode: uint32(mf.dirMode),
			AllowOther:      mf.allowOther,
			FsName:          "s3gdsfs:" + mf.bucket,
			Debug:           mf.debugFUSE,
			DirectIO:        s3fs.DirectIO(mf.directIO),
			DirectIOMinSize: int64(mf.directIOMinSize),
			PollRequests:    mf.fusePoll,
		},
		GPU: daemon.GPUConfig{
			Mode:           mf.gpu,
			StandinDir:     mf.standinDir,
			RDMA:           mf.rdma,
			RDMALibrary:    mf.rdmaLib,
			DeclineIsError: mf.declineIsError,
			Engine: rdmaread.Config{
				Streams:     mf.gpuStreams,
				MaxOps:      mf.gpuOps,
				MaxBytes:    int64(mf.gpuBytes),
				RDMAChunk:   int64(mf.rdmaChunk),
				PartSize:    int64(mf.gpuPart),
				ReadTimeout: mf.readTimeout,
				Retries:     zeroMeansNone(mf.retries),
				Staging:     cufile.StagerConfig{SlotSize: int(mf.stagingSlotSize), Slots: mf.stagingSlots},
			},
		},
		Splice:       string(mf.splice),
		ReadAhead:    int64(mf.readAhead),
		MetricsAddr:  metrics,
		CheckTimeout: 2*mf.connectTimeout + 10*time.Second,
		Log:          log,
	}, nil
}

// on resolves --stream for the endpoint.
func (f policyFlag) on(endpoint string) bool {
	switch f {
	case "always":
		return true
	case "never":
		return false
	}
	return objstore.NearEndpoint(endpoint)
}

// defaultFusePoll is how long a thread that has just replied polls for
// the next request (threads that have not, while another polls, a
// twentieth of it): it
// covers the gap between a reply and a streaming reader's next request,
// which on the 16-core machine, a VM whose idle CPUs halt, includes the
// reader's own wake-up and often passed 50 us (one reader read 3.26-3.81
// GB/s, 0.66-0.87 of raw, with 50 us for every thread, 3.44-4.75, 0.77-1.08,
// with 1 ms for every thread, 2.29-2.42 without polling; docs/benchmarks.md).
// With fewer than 8 CPUs the polling threads take the cores the reader and
// a local server need, so none there. An idle mount sleeps 1 ms after its
// last request. maxFusePoll bounds what a thread may spin for nothing.
func defaultFusePoll() time.Duration {
	if runtime.NumCPU() >= 8 {
		return time.Millisecond
	}
	return 0
}

const maxFusePoll = 10 * time.Millisecond

// zeroMeansNone maps a flag's 0 ("none": no retries, no cache, never
// judged slow) onto the core's negative value, since the core reads 0 as
// "the default".
func zeroMeansNone[T int | int64](n T) T {
	if n == 0 {
		return -1
	}
	return n
}

func newLogger(level, file string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	var w io.Writer = os.Stderr
	if file != "" {
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--log-file: %w", err)
		}
		w = f
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), nil
}

// pipeRaisedEnv carries fs.pipe-max-size as it was into the process that
// raised it and started again.
const pipeRaisedEnv = "S3GDSFS_PIPE_MAX_SIZE_WAS"

// raisePipeLimit lets --splice work where the kernel's pipes are too small
// for a spliced reply: as root it raises fs.pipe-max-size (docs/operations.md)
// and, in the foreground, runs the command again in this process, since
// go-fuse read the old limit when the program started (a background child
// starts afresh anyway). Without root it leaves the limit, and the mount
// says why it does not splice.
func raisePipeLimit(mf *mountFlags, log *slog.Logger) error {
	if mf.splice == "never" || !mf.stream.on(mf.endpoint) || !strings.HasPrefix(mf.endpoint, "http://") {
		return nil // nothing to splice: leave the limit alone
	}
	return raisePipeLimitAndRestart(log, !mf.foreground && os.Getenv(readyFDEnv) == "")
}

// raisePipeLimitAndRestart raises fs.pipe-max-size where it is too small
// for splicing and this process may (root), and then runs the command
// again in this process, unless a child will be started anyway. The
// process that starts again logs what the limit was.
func raisePipeLimitAndRestart(log *slog.Logger, childFollows bool) error {
	if was := os.Getenv(pipeRaisedEnv); was != "" {
		log.Info("raised fs.pipe-max-size so that pipes hold a spliced reply (--splice=never leaves it)", "was", was, "now", vfs.WantPipeMaxSize)
		return nil
	}
	if os.Geteuid() != 0 {
		return nil
	}
	was, err := daemon.RaisePipeLimit()
	if err != nil || was == "" {
		return nil // the mount says why it does not splice
	}
	os.Setenv(pipeRaisedEnv, was)
	if childFollows {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("starting again after raising fs.pipe-max-size: %w", err)
	}
	return syscall.Exec(exe, os.Args, os.Environ())
}

// readyFDEnv names the pipe on which a background child says it mounted.
const readyFDEnv = "S3GDSFS_READY_FD"

func runMount(args []string, helperForm bool) error {
	mf, positional, err := parseMountArgs(args, helperForm)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("want exactly one MOUNTPOINT after the flags, got %d arguments: %q", len(positional), positional)
	}
	mountpoint := positional[0]
	log, err := newLogger(mf.logLevel, mf.logFile)
	if err != nil {
		return err
	}
	cfg, err := mf.config(mountpoint, log)
	if err != nil {
		return err
	}
	if err := raisePipeLimit(&mf, log); err != nil {
		return err
	}
	if !mf.foreground && os.Getenv(readyFDEnv) == "" {
		return startInBackground(args)
	}
	d, err := daemon.Start(cfg)
	ready := readyPipe()
	if err != nil {
		if ready != nil {
			fmt.Fprintln(ready, err)
		}
		return err
	}
	if ready != nil {
		fmt.Fprintln(ready, "ok")
		ready.Close()
	}
	return serveUntilSignal(d, log)
}

func serveUntilSignal(d *daemon.Daemon, log *slog.Logger) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() { d.Wait(); close(done) }()
	select {
	case <-done:
		log.Info("unmounted from outside")
		return nil
	case s := <-sigs:
		log.Info("unmounting", "signal", s.String())
	}
	if err := d.Unmount(); err != nil {
		return err
	}
	<-done
	return nil
}

func readyPipe() *os.File {
	if os.Getenv(readyFDEnv) == "" {
		return nil
	}
	return os.NewFile(3, "ready")
}

// startInBackground re-runs the command detached from the terminal and
// returns once the child reports the mount ready, or its error.
func startInBackground(args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, args...)
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
