package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mountinfo"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = testenv.BuildProgram("s3gdsfs"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(filepath.Dir(binary))
	os.Exit(code)
}

// runCLI runs the command with a hard bound: a hang is a failure.
func runCLI(t *testing.T, env []string, args ...string) testenv.Run {
	t.Helper()
	return testenv.RunProgram(t, binary, env, args...)
}

func credsEnv(srv *testenv.Server) []string {
	return []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=" + srv.Region}
}

func TestBadCommandLinesNameTheProblem(t *testing.T) {
	mp := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--bogus", mp}, "-bogus"},
		{[]string{"mount", mp}, "--endpoint"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--memory-limit", "12XB", mp}, "memory-limit"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "colour=blue", mp}, "colour"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--file-mode", "999", mp}, "file-mode"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--log-level", "loud", mp}, "--log-level"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1"}, "MOUNTPOINT"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--bucket", "/x", mp}, "--bucket"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--direct-io=sometimes", mp}, "direct-io"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "direct_io=maybe", mp}, "direct_io=maybe"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--direct-io-min-size", "0", mp}, "--direct-io-min-size"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--stream=sometimes", mp}, "stream"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--stream-idle", "0s", mp}, "--stream-idle"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--stream-min-rate", "fast", mp}, "stream-min-rate"},
		// Removed flags are refused by name.
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--push-readers", "-1", mp}, "--push-readers"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--push-workers", "0", mp}, "--push-workers"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "push_readers=many", mp}, "push_readers"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--fuse-poll", "-1us", mp}, "--fuse-poll"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--fuse-poll", "1s", mp}, "--fuse-poll"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "fuse_poll=soon", mp}, "fuse_poll"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--staging-streams", "0", mp}, "--staging-streams 0"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--staging-streams", "65", mp}, "--staging-streams 65"},
		// Removed: one pool of staging slots is the design.
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--staging-per-copier", "2", mp}, "--staging-per-copier"},
		// Ids are 32 bits: a larger one would wrap to another user's.
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--gid", "4294967296", mp}, "--gid 4294967296: not an id from 0 to 4294967294"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--uid", "4294967295", mp}, "--uid 4294967295: "},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "uid=8589934592", mp}, "-o uid=8589934592: "},
		// Timeouts: a negative one would fail every read.
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--read-timeout", "-1s", mp}, "--read-timeout -1s: must be above 0"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--read-timeout", "0", mp}, "--read-timeout 0s: must be above 0"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--connect-timeout", "0", mp}, "--connect-timeout 0s: must be above 0"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--meta-ttl", "-1s", mp}, "--meta-ttl -1s: "},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--negative-ttl", "-1s", mp}, "--negative-ttl -1s: "},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "retries=-1", mp}, "--retries -1: "},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--block-size", "100", mp}, "--block-size 100: at least 4096 bytes"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--rdma-chunk", "4KiB", mp}, "--rdma-chunk 4KiB: "},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--staging-slot-size", "1KiB", mp}, "--staging-slot-size 1KiB: "},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--gpu-read-ahead", "4KiB", mp}, "--gpu-read-ahead 4KiB: 0 (off) or at least 1MiB"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "--gpu", "off", "--rdma", "loopback", mp}, "--rdma loopback: needs GPU reads"},
		// An unknown -o option is named without its value, which may be a
		// secret; a quoted value keeps its commas.
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", "aws_secret_access_key=hunter2", mp}, "-o aws_secret_access_key: unknown option"},
		{[]string{"mount", "--endpoint", "http://127.0.0.1:1", "-o", `comment="a,b",region="x`, mp}, "double quote is not closed"},
		{[]string{"frobnicate"}, "unknown command"},
	} {
		r := runCLI(t, nil, c.args...)
		if r.Code != exitUsage || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("s3gdsfs %v: exit %d, stderr %q; want exit %d and a message naming %q", c.args, r.Code, r.Stderr, exitUsage, c.want)
		}
		if strings.Contains(r.Stderr, "hunter2") {
			t.Errorf("s3gdsfs %v: the refused option's value is in the message: %q", c.args, r.Stderr)
		}
	}
}

// mountConfig is the configuration the mount command makes of args.
func mountConfig(t *testing.T, args ...string) daemon.Config {
	t.Helper()
	mf, _, err := parseMountArgs(append(args, "/mnt"), false)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	cfg, err := mf.config("/mnt", nil)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cfg
}

// The flags reach the configuration's fields, and a mount given none has
// daemon.Default's: the defaults are written once.
func TestFlagsReachTheConfiguration(t *testing.T) {
	def := mountConfig(t, "--endpoint", "http://127.0.0.1:1")
	want := daemon.Default()
	if def.GPU.Config != want.GPU.Config || def.Core.BlockSize != want.Core.BlockSize || def.Read != want.Read ||
		def.S3.ConnectTimeout != want.S3.ConnectTimeout || def.Metrics != want.Metrics {
		t.Errorf("defaults differ from daemon.Default: GPU %+v read %+v metrics %+v", def.GPU.Config, def.Read, def.Metrics)
	}
	got := mountConfig(t, "--endpoint", "http://127.0.0.1:1", "--staging-slot-size", "2MiB", "-o", "staging_streams=3,read_timeout=7s,retries=0",
		"--gid", "4294967294", "--meta-ttl", "0", "--pprof", "--gpu-raw-gets=false", "-o", "gpu_read_ahead=0")
	if got.GPU.Staging.SlotSize != 2<<20 || got.GPU.Staging.Streams != 3 || got.Read.ReadTimeout != 7*time.Second || got.Read.Retries != 0 ||
		got.FS.GID != 4294967294 || got.Core.MetaTTL != 0 || !got.Metrics.Pprof || !got.GPU.ClientGets || got.GPU.ReadAhead != 0 {
		t.Errorf("flags not applied: staging %+v, read %+v, gid %d, meta-ttl %v, pprof %v, client gets %v",
			got.GPU.Staging, got.Read, got.FS.GID, got.Core.MetaTTL, got.Metrics.Pprof, got.GPU.ClientGets)
	}
}

// -o values in double quotes keep their commas, as mount(8) and fstab
// read them, and lose the quotes.
func TestQuotedOptionValues(t *testing.T) {
	cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1", "-o", `comment="a,b",region="eu,west",log_level=warn`)
	if cfg.S3.Region != "eu,west" {
		t.Errorf(`-o comment="a,b",region="eu,west": region %q, want eu,west`, cfg.S3.Region)
	}
}

func TestDirectIOFlagForms(t *testing.T) {
	for _, c := range []struct {
		args []string
		want vfs.DirectIO
	}{
		{nil, vfs.DirectIOAuto},
		{[]string{"--direct-io"}, vfs.DirectIOAlways},
		{[]string{"--direct-io=never"}, vfs.DirectIONever},
		{[]string{"--direct-io=false"}, vfs.DirectIONever},
		{[]string{"-o", "direct_io"}, vfs.DirectIOAlways},
		{[]string{"-o", "direct_io=auto,direct_io_min_size=8MiB"}, vfs.DirectIOAuto},
	} {
		args := append([]string{"--endpoint", "http://127.0.0.1:1"}, c.args...)
		cfg := mountConfig(t, args...)
		if cfg.Core.DirectIO != c.want {
			t.Errorf("%v: direct I/O policy %v, want %v", c.args, cfg.Core.DirectIO, c.want)
		}
	}
	mf, _, _ := parseMountArgs([]string{"--endpoint", "http://x:1", "-o", "direct_io_min_size=8MiB", "/mnt"}, false)
	if cfg, _ := mf.config("/mnt", nil); cfg.Core.DirectIOMinSize != 8<<20 {
		t.Errorf("direct_io_min_size=8MiB gave %d bytes", cfg.Core.DirectIOMinSize)
	}
}

// --stream=auto streams from stores on this host or a private network
// only; the bare flag means always.
func TestStreamFlagForms(t *testing.T) {
	for _, c := range []struct {
		endpoint string
		args     []string
		want     bool
		rate     int64
	}{
		{"http://127.0.0.1:1", nil, true, 64 << 20},
		{"https://52.216.0.1", nil, false, 64 << 20},
		{"https://52.216.0.1", []string{"--stream"}, true, 64 << 20},
		{"http://10.0.0.7:9000", []string{"--stream=never"}, false, 64 << 20},
		{"http://127.0.0.1:1", []string{"-o", "stream=off,stream_min_rate=0"}, false, 0},
		{"http://127.0.0.1:1", []string{"--stream-min-rate", "1GiB"}, true, 1 << 30},
	} {
		args := append([]string{"--endpoint", c.endpoint}, c.args...)
		cfg := mountConfig(t, args...)
		if on := !cfg.Core.NoStream; on != c.want || cfg.Core.StreamMinRate != c.rate {
			t.Errorf("%s %v: streams %v, min rate %d; want %v, %d", c.endpoint, c.args, on, cfg.Core.StreamMinRate, c.want, c.rate)
		}
	}
}

// A flag's 0 means none, not the core's default: --cache-size 0 is no
// cache, --retries 0 no retry, --stream-min-rate 0 never slow.
// A mount given no --metrics-addr serves its metrics, which name buckets
// and keys, on loopback only.
func TestMetricsListenOnLoopbackByDefault(t *testing.T) {
	addr := mountConfig(t, "--endpoint", "http://127.0.0.1:1").Metrics.Addr
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("metrics address %q (%v) without --metrics-addr, want a loopback one", addr, err)
	}
}

func TestZeroFlagsMeanNone(t *testing.T) {
	cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1", "--cache-size", "0", "--retries", "0", "--stream-min-rate", "0")
	if cfg.Core.CacheSize != 0 || cfg.Read.Retries != 0 || cfg.Core.StreamMinRate != 0 {
		t.Fatalf("cache %d, retries %d, stream min rate %d: want 0 (none) each",
			cfg.Core.CacheSize, cfg.Read.Retries, cfg.Core.StreamMinRate)
	}
	core, err := vfs.New(nil, cfg.Core, metrics.New(func() float64 { return 0 }, func() float64 { return 0 }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := core.Config().CacheSize; got != 0 {
		t.Fatalf("--cache-size 0 gave a cache of %d bytes", got)
	}
}

func TestStartupFailuresAreClearAndQuick(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp := t.TempDir()
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"missing bucket", credsEnv(srv), []string{"mount", "--endpoint", srv.Endpoint, "--bucket", "nope", "--metrics-addr", "off", mp}, `bucket "nope" does not exist`},
		{"wrong credentials", []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=wrong-secret-value", "AWS_REGION=us-east-1"},
			[]string{"mount", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", "off", mp}, "access denied"},
		{"unreachable endpoint", credsEnv(srv), []string{"mount", "--endpoint", "http://127.0.0.1:1", "--bucket", "data", "--metrics-addr", "off", mp}, "cannot reach endpoint"},
		{"mountpoint missing", credsEnv(srv), []string{"mount", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", "off", filepath.Join(mp, "absent")}, "mountpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, c.env, c.args...)
			if r.Code != exitFailure || !strings.Contains(r.Stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", r.Code, r.Stderr, exitFailure, c.want)
			}
			if strings.Contains(r.Stderr, srv.SecretKey) || strings.Contains(r.Stderr, "wrong-secret-value") {
				t.Fatal("a secret key appeared in the output")
			}
		})
	}
}

func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	return mountsAt(t, dir) > 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMountServesUntilSIGINTThenUnmounts(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "dir/hello.txt", []byte("hello\n"))
	mp := t.TempDir()
	cmd := exec.Command(binary, "mount", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", "127.0.0.1:0", mp)
	cmd.Env = append(os.Environ(), credsEnv(srv)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); syscall.Unmount(mp, syscall.MNT_DETACH) })
	waitFor(t, "the mount", func() bool { return isMounted(t, mp) })
	got, err := os.ReadFile(filepath.Join(mp, "dir", "hello.txt"))
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("read through the mount: %q %v", got, err)
	}
	st := runCLI(t, nil, "stats", "--json", mp)
	if st.Code != 0 || !strings.Contains(st.Stdout, `"posix_read_bytes_total": 6`) || !strings.Contains(st.Stdout, `"abi_version": 1`) {
		t.Fatalf("stats: exit %d, stdout %s, stderr %s", st.Code, st.Stdout, st.Stderr)
	}
	if st := runCLI(t, nil, "stats", t.TempDir()); st.Code != exitFailure || !strings.Contains(st.Stderr, "s3gdsfs mount") {
		t.Fatalf("stats of a plain directory: exit %d, %q", st.Code, st.Stderr)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGINT: %v; stderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGINT")
	}
	if isMounted(t, mp) {
		t.Fatal("still mounted after SIGINT")
	}
	if strings.Contains(stderr.String(), srv.SecretKey) {
		t.Fatal("the secret key appeared in the log")
	}
}

func TestMountHelperFormGoesToBackground(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "a.txt", []byte("fstab\n"))
	mp := t.TempDir()
	// As mount.fuse3 calls it for: data  MP  fuse.s3gdsfs  _netdev,endpoint=...  0 0
	r := runCLI(t, credsEnv(srv), "data", mp, "-o", "rw,_netdev,nofail,endpoint="+srv.Endpoint+",metrics_addr=off,meta_ttl=5s")
	if r.Code != 0 {
		t.Fatalf("helper form: exit %d, stderr %q", r.Code, r.Stderr)
	}
	t.Cleanup(func() { syscall.Unmount(mp, syscall.MNT_DETACH) })
	got, err := os.ReadFile(filepath.Join(mp, "a.txt"))
	if err != nil || string(got) != "fstab\n" {
		t.Fatalf("read: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(mp, "b.txt"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write with -o rw: %v, want EROFS (the mount is read-only)", err)
	}
	if err := syscall.Unmount(mp, 0); err != nil {
		t.Fatalf("umount: %v", err)
	}
}

// The demo is a program of its own: the command says where it is, and
// links no S3 server for it.
func TestDemoIsAProgramOfItsOwn(t *testing.T) {
	r := runCLI(t, nil, "demo", "--once")
	if r.Code != exitUsage || !strings.Contains(r.Stderr, "make demo") || !strings.Contains(r.Stderr, "s3gdsfs-demo") {
		t.Errorf("s3gdsfs demo: exit %d, stderr %q; want exit %d and a message naming make demo and s3gdsfs-demo", r.Code, r.Stderr, exitUsage)
	}
	out, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, mod := range []string{"gofakes3", "afero"} {
		if strings.Contains(string(out), mod) {
			t.Errorf("s3gdsfs links %s, the demo's S3 server", mod)
		}
	}
}

// --fuse-poll defaults to 1ms on machines of 8 CPUs or more and to 0 on
// smaller ones, and takes fstab's spelling.
func TestFusePollFlag(t *testing.T) {
	want := time.Duration(0)
	if runtime.NumCPU() >= 8 {
		want = time.Millisecond
	}
	if cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1"); cfg.FS.PollRequests != want {
		t.Errorf("default --fuse-poll %v on %d CPUs, want %v", cfg.FS.PollRequests, runtime.NumCPU(), want)
	}
	if cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1", "-o", "fuse_poll=200us"); cfg.FS.PollRequests != 200*time.Microsecond {
		t.Errorf("-o fuse_poll=200us: got %v", cfg.FS.PollRequests)
	}
	if cfg := mountConfig(t, "--endpoint", "http://127.0.0.1:1", "--fuse-poll", "0"); cfg.FS.PollRequests != 0 {
		t.Errorf("--fuse-poll 0: got %v", cfg.FS.PollRequests)
	}
}

// An endpoint that accepts connections and never answers fails the mount
// within the bound its message names (--connect-timeout + --read-timeout),
// not after the S3 client's retries of --read-timeout each.
func TestStartupAgainstSilentEndpointFailsWithinItsBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	start := time.Now()
	r := runCLI(t, []string{"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_REGION=us-east-1"},
		"mount", "--endpoint", "http://"+ln.Addr().String(), "--bucket", "data", "--metrics-addr", "off",
		"--connect-timeout", "1s", "--read-timeout", "2s", t.TempDir())
	elapsed := time.Since(start)
	t.Logf("failed after %v: %s", elapsed.Round(time.Millisecond), strings.TrimSpace(r.Stderr))
	const bound = 3 * time.Second
	if r.Code != exitFailure || !strings.Contains(r.Stderr, "--read-timeout 2s") || !strings.Contains(r.Stderr, "within "+bound.String()) {
		t.Fatalf("exit %d, stderr %q; want exit %d and a message naming the bound %v and --read-timeout", r.Code, r.Stderr, exitFailure, bound)
	}
	if elapsed > bound+3*time.Second {
		t.Fatalf("failed after %v; the message names %v", elapsed, bound)
	}
}

// startMount runs the built command in the foreground and waits until it
// reports the mount; the process is killed at the end of the test.
func startMount(t *testing.T, srv *testenv.Server, mp string, stderr *testenv.SyncBuffer, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"mount", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", "off"}, extra...)
	cmd := exec.Command(binary, append(args, mp)...)
	cmd.Env = append(os.Environ(), credsEnv(srv)...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); syscall.Unmount(mp, syscall.MNT_DETACH) })
	waitFor(t, "the mount", func() bool { return strings.Contains(stderr.String(), "msg=mounted") })
	return cmd
}

func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	at, err := mountinfo.At(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(at)
}

// Within --meta-ttl of a SIGKILL the kernel still answers a stat of the
// mountpoint from its cache; the next mount must still find the dead one
// and detach it rather than stack on it.
func TestMountAfterSIGKILLDetachesTheDeadMount(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "a.txt", []byte("alive\n"))
	mp := t.TempDir()
	var first testenv.SyncBuffer
	cmd := startMount(t, srv, mp, &first, "--meta-ttl", "60s")
	if _, err := os.Stat(mp); err != nil { // the root's attributes now cached
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(mp); err != nil {
		t.Logf("stat of the dead mount: %v", err)
	}
	var second testenv.SyncBuffer
	startMount(t, srv, mp, &second, "--meta-ttl", "60s")
	if !strings.Contains(second.String(), "detached a dead FUSE mount") {
		t.Errorf("the second mount logged no detach of the dead one:\n%s", second.String())
	}
	if n := mountsAt(t, mp); n != 1 {
		t.Fatalf("%d mounts at %s, want 1 (the new one, not stacked on the dead one)", n, mp)
	}
	if got, err := os.ReadFile(filepath.Join(mp, "a.txt")); err != nil || string(got) != "alive\n" {
		t.Fatalf("read through the new mount: %q %v", got, err)
	}
}

// Mounting over a live s3gdsfs mount fails with a message naming it.
func TestMountOverALiveMountFails(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp := t.TempDir()
	var first testenv.SyncBuffer
	startMount(t, srv, mp, &first)
	r := runCLI(t, credsEnv(srv), "mount", "--endpoint", srv.Endpoint, "--bucket", "data", "--metrics-addr", "off", mp)
	if r.Code != exitFailure || !strings.Contains(r.Stderr, "live s3gdsfs mount (s3gdsfs:data)") {
		t.Fatalf("exit %d, stderr %q; want exit %d and a message naming the live mount", r.Code, r.Stderr, exitFailure)
	}
	if n := mountsAt(t, mp); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, mp)
	}
}

// A file held open delays the exit after SIGTERM, and the log says what
// the daemon waits for; a second signal detaches the mount and exits.
func TestShutdownWithAFileOpenSaysWhyAndASecondSignalExits(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "held.txt", []byte("held\n"))
	mp := t.TempDir()
	var stderr testenv.SyncBuffer
	cmd := startMount(t, srv, mp, &stderr)
	f, err := os.Open(filepath.Join(mp, "held.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the log of the wait", func() bool { return strings.Contains(stderr.String(), "waiting for the files still open") })
	if !strings.Contains(stderr.String(), "open_files=1") {
		t.Errorf("the wait's log does not count the open file:\n%s", stderr.String())
	}
	select {
	case err := <-exited:
		t.Fatalf("exited (%v) with a file open after one signal; the holder is still served", err)
	default:
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after the second signal: %v\n%s", err, stderr.String())
		}
		t.Logf("exited %v after the second signal", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5s after the second signal:\n%s", stderr.String())
	}
	if isMounted(t, mp) {
		t.Fatal("still mounted after the second signal")
	}
	if !strings.Contains(stderr.String(), "second signal") {
		t.Errorf("the log does not say why it exited:\n%s", stderr.String())
	}
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// The mount's peak resident memory stays near --memory-limit under 64
// readers (splicing off: every byte goes through block memory), GPU reads
// beside them (the host stand-in: its staging ring is Go memory of the
// daemon, as CUDA's pinned ring is host memory) and 7,500 lookups of
// missing names after them: Go's memory limit, set from --memory-limit
// and the stand-in's staging, keeps the collector from letting garbage
// grow to the size of the live block memory. The bound is the documented
// one (docs/operations.md): 1.25 x --memory-limit plus the staging ring,
// plus here the stand-in's "device memory", the destination files the
// daemon maps, which on a GPU is no host memory at all. The daemon is the
// built command, so that its peak (VmHWM) is its own.
func TestMountPeakMemoryStaysNearTheMemoryLimit(t *testing.T) {
	testenv.RequireFUSE(t)
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const objects, objSize = 16, 32 << 20
	for i := range objects {
		srv.PutRandomObject(t, "data", fmt.Sprintf("obj%02d.bin", i), objSize, int64(i))
	}
	mp := t.TempDir()
	const limit = 256 << 20
	var stderr testenv.SyncBuffer
	// Half the block memory caches blocks (the default 1 GiB is more than
	// --memory-limit allows): it stays live through the lookups.
	const slots, slotSize = 16, 1 << 20 // the staging ring: 16 MiB
	const gpuReaders, gpuBuf = 4, 4 << 20
	bufDir := t.TempDir()
	cmd := startMount(t, srv, mp, &stderr, "--memory-limit", "256MiB", "--cache-size", "128MiB", "--splice", "never",
		"--gpu", "host-standin", "--host-standin-dir", bufDir,
		"--staging-slots", strconv.Itoa(slots), "--staging-slot-size", "1MiB")
	var wg sync.WaitGroup
	errs := make(chan error, 64+gpuReaders)
	var gpuBytes atomic.Int64
	for r := range gpuReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := gpuReadObjects(mp, bufDir, r, gpuReaders, gpuBuf, objects, objSize, &gpuBytes); err != nil {
				errs <- err
			}
		}()
	}
	for r := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(filepath.Join(mp, fmt.Sprintf("obj%02d.bin", r%objects)))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			buf := make([]byte, 1<<20)
			var n int64
			for {
				k, err := f.Read(buf)
				n += int64(k)
				if err != nil {
					if n != objSize {
						errs <- fmt.Errorf("reader %d: %d bytes, %v", r, n, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	afterReads := vmHWM(t, cmd.Process.Pid)
	const lookups = 7500
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= lookups; i = next.Add(1) {
				if _, err := os.Stat(filepath.Join(mp, fmt.Sprintf("missing-%05d", i))); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("stat of a missing name: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	peak := vmHWM(t, cmd.Process.Pid)
	const staging, device = slots * slotSize, gpuReaders * gpuBuf
	bound := int64(limit)*5/4 + staging + device
	t.Logf("peak RSS %.0f MiB after 64 readers and %d GPU readers (%d MiB into the GPU), %.0f MiB after %d missing lookups on top; "+
		"bound %.0f MiB (1.25 x --memory-limit %d MiB + staging %d x %d MiB + the stand-in's device buffers %d x %d MiB)",
		float64(afterReads)/(1<<20), gpuReaders, gpuBytes.Load()>>20, float64(peak)/(1<<20), lookups, float64(bound)/(1<<20),
		limit>>20, slots, slotSize>>20, gpuReaders, gpuBuf>>20)
	if gpuBytes.Load() != objects*objSize {
		t.Errorf("%d bytes read into the GPU, want %d (every object once)", gpuBytes.Load(), objects*objSize)
	}
	if peak > bound {
		t.Errorf("peak RSS %d MiB, above %d MiB", peak>>20, bound>>20)
	}
	if !strings.Contains(stderr.String(), "Go memory limit set") {
		t.Errorf("the log does not say which Go memory limit was set:\n%s", stderr.String())
	}
}

// gpuReadObjects is GPU reader r of n: it reads every nth of the objects
// (objNN.bin, each of size bytes of seed NN), from the rth, whole through
// the read ioctl, in reads of bufSize into a host stand-in buffer of its
// own, and checks each read's bytes.
func gpuReadObjects(mp, bufDir string, r, n, bufSize, objects, size int, total *atomic.Int64) error {
	name := fmt.Sprintf("gpu%d", r)
	path := filepath.Join(bufDir, name)
	if err := os.WriteFile(path, make([]byte, bufSize), 0o600); err != nil {
		return err
	}
	for i := r; i < objects; i += n {
		f, err := os.Open(filepath.Join(mp, fmt.Sprintf("obj%02d.bin", i)))
		if err != nil {
			return err
		}
		for off := 0; off < size; off += bufSize {
			req := abi.NewReadRequest()
			req.Flags = abi.FlagHostBuffer
			req.Offset, req.Length = uint64(off), uint64(bufSize)
			copy(req.IPCHandle[:], name)
			res, err := s3gds.Read(f, &req)
			if err != nil || res.Bytes != uint64(bufSize) {
				f.Close()
				return fmt.Errorf("GPU reader %d: obj%02d.bin at %d: %+v, %v", r, i, off, res, err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				f.Close()
				return err
			}
			if !bytes.Equal(got, testenv.RandomBytes(int64(i), int64(off), bufSize)) {
				f.Close()
				return fmt.Errorf("GPU reader %d: obj%02d.bin at %d: the buffer's bytes differ from the object's", r, i, off)
			}
			total.Add(int64(res.Bytes))
		}
		f.Close()
	}
	return nil
}
