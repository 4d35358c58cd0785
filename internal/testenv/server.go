package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Region is the region versitygw serves and clients must sign for.
const Region = "us-east-1"

// Options tune StartServer. The zero value is ready to use.
type Options struct {
	// BaseDir is where the server's temporary directory is created
	// (for example /dev/shm to keep object data in memory). "" means
	// os.TempDir().
	BaseDir string
	// Binary is the versitygw executable; "" means FindVersityGW.
	Binary string
	// StartTimeout bounds the wait for the server to answer; 0 means 30s.
	StartTimeout time.Duration
	// CloseConnections has the server close every connection after its
	// response, versitygw's own default. Otherwise it keeps them open
	// (--keep-alive), as S3 services do, so that clients' connection pools
	// are exercised and per-request costs are a real server's.
	CloseConnections bool
}

// Server is a running versitygw instance with a posix backend.
type Server struct {
	Endpoint  string // "http://127.0.0.1:PORT"
	Host      string // "127.0.0.1:PORT"
	AccessKey string
	SecretKey string
	Region    string
	// Dir is the posix root: each bucket is a subdirectory, each object a file.
	Dir string
	// Client is a path-style client with the root credentials.
	Client *minio.Client

	tempDir   string
	cmd       *exec.Cmd
	exited    chan struct{}
	output    *tailBuffer
	closeOnce sync.Once
	closeErr  error
}

// Pid is the server process's id (to account its CPU time).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Start runs a fresh server for the test and stops it, removing its data,
// when the test and its subtests finish, failed or not.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartInMemory is Start with the server's data on /dev/shm where the host
// has it, for benchmarks whose server should not wait on a disk.
func StartInMemory(t testing.TB) *Server {
	t.Helper()
	opts := Options{}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		opts.BaseDir = "/dev/shm"
	}
	return StartWith(t, opts)
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := StartServer(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: versitygw output (last part):\n%s", s.Output())
		}
		if err := s.Close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return s
}

// StartServer runs a fresh server. The caller must Close it.
func StartServer(opts Options) (*Server, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = FindVersityGW(); err != nil {
			return nil, err
		}
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	tempDir, err := os.MkdirTemp(opts.BaseDir, "testenv-versitygw-")
	if err != nil {
		return nil, fmt.Errorf("create server directory: %w", err)
	}
	// Another process may grab the port between our probe and the server's
	// bind, so a lost race is retried with a new port.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := launch(bin, tempDir, timeout, !opts.CloseConnections)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	os.RemoveAll(tempDir)
	return nil, lastErr
}

var errPortTaken = errors.New("port already in use")

func launch(bin, tempDir string, timeout time.Duration, keepAlive bool) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(tempDir, "data")
	metaDir := filepath.Join(tempDir, "meta")
	for _, d := range []string{dataDir, metaDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	s := &Server{
		Host:      "127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "AK" + randomHex(9),
		SecretKey: randomHex(20),
		Region:    Region,
		Dir:       dataDir,
		tempDir:   tempDir,
		exited:    make(chan struct{}),
		output:    newTailBuffer(64 << 10),
	}
	s.Endpoint = "http://" + s.Host

	args := []string{
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region,
		"--port", s.Host,
		"--quiet", // no per-request log lines
	}
	if keepAlive {
		args = append(args, "--keep-alive")
	}
	args = append(args, "posix")
	// Object metadata lives in xattrs; filesystems without user xattrs
	// (some overlay or tmpfs setups) get a sidecar directory instead.
	if !supportsUserXattr(dataDir) {
		args = append(args, "--sidecar", metaDir)
	}
	args = append(args, dataDir)

	s.cmd = exec.Command(bin, args...)
	s.cmd.Env = serverEnviron()
	s.cmd.Stdout = s.output
	s.cmd.Stderr = s.output
	s.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // a Ctrl-C at the terminal is ours to handle
		Pdeathsig: syscall.SIGKILL, // never outlive a crashed test binary
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()

	// The tests' own client, which uploads the fixtures, takes a
	// connection per request: versitygw with --keep-alive has closed a
	// kept connection under a PUT's body (a broken pipe mid-upload), and
	// what the tests measure is the daemon's connections, not this one's.
	setup, err := minio.DefaultTransport(false)
	if err != nil {
		s.kill()
		return nil, err
	}
	setup.DisableKeepAlives = true
	s.Client, err = minio.New(s.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    setup,
	})
	if err != nil {
		s.kill()
		return nil, err
	}
	if err := s.waitReady(timeout); err != nil {
		s.kill()
		if strings.Contains(s.Output(), "address already in use") {
			return nil, fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return nil, fmt.Errorf("%v\ncommand: %s %s\noutput:\n%s", err, bin, strings.Join(args, " "), s.Output())
	}
	return s, nil
}

// waitReady polls with an authenticated request until the server answers.
func (s *Server) waitReady(timeout time.Duration) error {
	// The shared client retries for seconds; the probe must notice an
	// early exit quickly instead.
	probe, err := minio.New(s.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited during startup (%v)", s.cmd.ProcessState)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, lastErr = probe.ListBuckets(ctx)
		cancel()
		if lastErr == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("versitygw at %s did not answer within %v: %v", s.Endpoint, timeout, lastErr)
}

// Output returns the last part of the server's stdout and stderr.
func (s *Server) Output() string { return s.output.String() }

// Close stops the server and removes its directory. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.kill()
		if err := os.RemoveAll(s.tempDir); err != nil {
			s.closeErr = fmt.Errorf("remove server directory: %w", err)
		}
	})
	return s.closeErr
}

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
}

// serverEnviron drops the VGW_* and ROOT_* variables versitygw reads its
// settings from, so a developer's shell cannot change the test server.
func serverEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			env = append(env, kv)
		}
	}
	return env
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func supportsUserXattr(dir string) bool {
	const name = "user.testenv.probe"
	if err := syscall.Setxattr(dir, name, []byte("1"), 0); err != nil {
		return false
	}
	syscall.Removexattr(dir, name)
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return strings.ToUpper(hex.EncodeToString(b))
}
