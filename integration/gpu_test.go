package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/vfs"
)

// gpuMount mounts bucket with the host stand-in in place of CUDA: buffers
// are files in the returned directory (a test aid; see docs/ioctl.md).
func gpuMount(t testing.TB, srv *testenv.Server, bucket string, tune func(*daemon.Config), parts ...mounttest.Part) (mp, bufDir string, d *daemon.Daemon) {
	t.Helper()
	bufDir = t.TempDir()
	mp, d = mountOf(t, srv, bucket, func(c *daemon.Config) {
		c.GPU.Mode = "host-standin"
		c.GPU.StandinDir = bufDir
		c.GPU.Staging.SlotSize = 1 << 20
		c.GPU.Staging.Slots = 8
		if tune != nil {
			tune(c)
		}
	}, parts...)
	return mp, bufDir, d
}

// hostBuffer makes a stand-in "device allocation" of size bytes filled with
// fill, and returns the name to put in the request.
func hostBuffer(t testing.TB, dir, name string, size int, fill byte) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte{fill}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func hostRequest(name string, off, length, dstOff uint64) *abi.ReadRequest {
	r := abi.NewReadRequest()
	r.Flags = abi.FlagHostBuffer
	r.Offset, r.Length, r.DstOffset = off, length, dstOff
	copy(r.IPCHandle[:], name)
	return &r
}

func TestGPUReadsLandByteExactAndAreCounted(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 9<<20 + 4321 // not a multiple of the slot
	srv.PutRandomObject(t, "data", "obj", size, 11)
	mp, dir, d := gpuMount(t, srv, "data", nil)

	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	const bufSize, dstOff = 12 << 20, 4096 + 123
	buf := hostBuffer(t, dir, "buf", bufSize, 0xEE)
	res, err := s3gds.Read(f, hostRequest(buf, 0, size, dstOff))
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != size || res.HTTPBytes != size || res.RDMABytes != 0 || res.Transport != abi.TransportHTTP || res.Decline != abi.DeclineNone {
		t.Fatalf("result %+v; want %d bytes over http, no decline", res, size)
	}
	got, _ := os.ReadFile(filepath.Join(dir, buf))
	if sha256.Sum256(got[dstOff:dstOff+size]) != sha256.Sum256(testenv.RandomBytes(11, 0, size)) {
		t.Fatal("bytes in the buffer differ from the object")
	}
	if !bytes.Equal(got[:dstOff], bytes.Repeat([]byte{0xEE}, dstOff)) || !bytes.Equal(got[dstOff+size:], bytes.Repeat([]byte{0xEE}, bufSize-dstOff-size)) {
		t.Fatal("bytes outside the destination range were written")
	}

	// Past the end: short. Zero length: nothing.
	res, err = s3gds.Read(f, hostRequest(buf, size-100, 1<<20, 0))
	if err != nil || res.Bytes != 100 {
		t.Fatalf("read across EOF: %+v %v; want 100 bytes", res, err)
	}
	res, err = s3gds.Read(f, hostRequest(buf, 5, 0, 0))
	if err != nil || res.Bytes != 0 || res.Transport != abi.TransportNone {
		t.Fatalf("zero-length read: %+v %v", res, err)
	}

	snap, _ := d.Metrics.Snapshot()
	if got := snap["gpu_read_bytes_total"].(map[string]float64)["http"]; got != size+100 {
		t.Fatalf("gpu_read_bytes_total{http} = %v, want %d", got, size+100)
	}
	if got := snap["gpu_read_bytes_total"].(map[string]float64)["rdma"]; got != 0 {
		t.Fatalf("gpu_read_bytes_total{rdma} = %v, want 0", got)
	}
	if got := snap["posix_read_bytes_total"].(float64); got != 0 {
		t.Fatalf("GPU reads counted as POSIX reads: %v", got)
	}
	if d.GPU.Imports().OpenImports() != 1 {
		t.Fatalf("open imports %d while the file is open, want 1 (reused)", d.GPU.Imports().OpenImports())
	}
	f.Close()
	if !settle(6*time.Second, func() bool { return d.GPU.Imports().OpenImports() == 0 }) {
		t.Fatal("timed out waiting: imports closed after the last file closed")
	}
}

// An object replaced under a file open for GPU reads: the read ioctl fails
// with ESTALE and, as after a POSIX read's ESTALE
// (TestOpenAfterESTALESeesTheNewVersionAtOnce), the very next open sees the
// new version, its size and its bytes through the ioctl, well within
// --meta-ttl: the failed read dropped the daemon's and the kernel's entry
// for the name.
func TestGPUReadESTALEOpenAfterSeesTheNewVersionAtOnce(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const oldSize, newSize = 6 << 20, 3<<20 + 777
	srv.PutRandomObject(t, "data", "sub/x.bin", oldSize, 1)
	mp, dir, _ := releasedGPUMount(t, srv, "data", func(c *daemon.Config) {
		c.Core.MetaTTL = time.Hour // the kernel's entry, its attributes and the core's
	})
	path, f := openListed(t, mp, "sub", "x.bin")
	buf := hostBuffer(t, dir, "buf", oldSize, 0)
	if res, err := s3gds.Read(f, hostRequest(buf, 0, 1<<20, 0)); err != nil || res.Bytes != 1<<20 {
		t.Fatalf("GPU read before the replacement: %+v %v", res, err)
	}
	newSum := srv.PutRandomObject(t, "data", "sub/x.bin", newSize, 2)
	if _, err := s3gds.Read(f, hostRequest(buf, 2<<20, 1<<20, 0)); !errors.Is(err, unix.ESTALE) {
		t.Fatalf("GPU read after the replacement: %v, want ESTALE", err)
	}
	start := time.Now()
	f2, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	fi, err := f2.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != newSize {
		t.Fatalf("open after the ESTALE: size %d, want the new version's %d (the old one's is %d)", fi.Size(), newSize, oldSize)
	}
	res, err := s3gds.Read(f2, hostRequest(buf, 0, oldSize, 0))
	if err != nil || res.Bytes != newSize {
		t.Fatalf("GPU read after the new open: %+v %v; want the new version's %d bytes", res, err, newSize)
	}
	got, err := os.ReadFile(filepath.Join(dir, buf))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(got[:newSize]); hex.EncodeToString(sum[:]) != newSum {
		t.Fatalf("GPU read after the new open: sha256 %x, want the new version's %s", sum, newSum)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("new open and read took %s", took)
	}
}

func TestGPUReadBadInputGetsClearErrnoAndWritesNothing(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 3<<20, 12)
	mp, dir, _ := gpuMount(t, srv, "data", nil)
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "small", 1<<20, 0x11)
	before, err := os.ReadFile(filepath.Join(dir, buf))
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		req  func() *abi.ReadRequest
		want unix.Errno
	}{
		{"destination past the allocation", func() *abi.ReadRequest { return hostRequest(buf, 0, 2<<20, 0) }, unix.ERANGE},
		{"destination offset past the allocation", func() *abi.ReadRequest { return hostRequest(buf, 0, 10, 1<<20) }, unix.ERANGE},
		{"handle that does not open", func() *abi.ReadRequest { return hostRequest("no-such-buffer", 0, 10, 0) }, unix.EBADF},
		{"handle escaping the directory", func() *abi.ReadRequest { return hostRequest("../../etc/passwd", 0, 10, 0) }, unix.EXDEV},
		{"device that does not exist", func() *abi.ReadRequest { r := hostRequest(buf, 0, 10, 0); r.Device = 3; return r }, unix.ENODEV},
		{"CUDA handle to a host stand-in daemon", func() *abi.ReadRequest { r := hostRequest(buf, 0, 10, 0); r.Flags = 0; return r }, unix.EINVAL},
		{"unknown flags", func() *abi.ReadRequest { r := hostRequest(buf, 0, 10, 0); r.Flags |= 1 << 9; return r }, unix.EINVAL},
		{"rdma only without RDMA", func() *abi.ReadRequest { r := hostRequest(buf, 0, 10, 0); r.Flags |= abi.FlagRDMAOnly; return r }, unix.ECANCELED},
		{"length past the allocation even at EOF", func() *abi.ReadRequest { return hostRequest(buf, 3<<20-10, 1<<20+1, 0) }, unix.ERANGE},
	}
	for _, c := range cases {
		_, err := s3gds.Read(f, c.req())
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Wrong version and size go through the raw ioctl (the client fills them in).
	for name, mutate := range map[string]func([]byte){
		"version": func(b []byte) { b[4] = 9 },
		"size":    func(b []byte) { b[0] = 128 },
	} {
		raw := hostRequest(buf, 0, 10, 0)
		raw.Size, raw.Version = abi.Size, abi.Version
		b := raw.Encode()
		mutate(b)
		if err := rawIoctl(f, abi.IocRead, b); !errors.Is(err, unix.EINVAL) {
			t.Errorf("wrong %s: %v, want EINVAL", name, err)
		}
	}
	// Another ioctl number (another size encoded in it): not ours.
	if err := rawIoctl(f, abi.IOWR('S', 1, 128), make([]byte, 128)); !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
		t.Errorf("foreign ioctl: %v, want ENOTTY", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, buf))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a refused request wrote into the buffer")
	}
	// The daemon still serves.
	if res, err := s3gds.Read(f, hostRequest(buf, 0, 1<<20, 0)); err != nil || res.Bytes != 1<<20 {
		t.Fatalf("valid read after bad ones: %+v %v", res, err)
	}
}

// Reads past the end are short whatever the offset, 2^63 and more too
// (docs/ioctl.md): 0 bytes, nothing written.
func TestGPUReadAtHugeOffsetsIsShort(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 1<<20, 13)
	mp, dir, _ := gpuMount(t, srv, "data", nil)
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "b", 4096, 0x22)
	for _, off := range []uint64{1 << 20, 1<<62 - 1, 1 << 62, 1 << 63, 1<<63 + 5, math.MaxUint64} {
		res, err := s3gds.Read(f, hostRequest(buf, off, 4096, 0))
		if err != nil || res.Bytes != 0 {
			t.Errorf("offset %d: %+v %v, want a short read of 0 bytes", off, res, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, buf)); !bytes.Equal(b, bytes.Repeat([]byte{0x22}, 4096)) {
		t.Error("a read past the end wrote into the buffer")
	}
}

// Under the host stand-in the caps name its backend and its one device, and
// say there is no CUDA.
func TestCapsUnderHostStandinSayNoCUDA(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, _, _ := gpuMount(t, srv, "data", nil)
	caps, err := s3gds.Caps(mp)
	if err != nil {
		t.Fatal(err)
	}
	if caps.CUDAAvailable || caps.CUDABackend != abi.CUDABackendHostStandin || len(caps.Devices) != 1 || caps.Devices[0].Name != "host-standin" {
		t.Errorf("caps %+v: want cuda_available false, backend host-standin, one device named host-standin", caps)
	}
}

func rawIoctl(f *os.File, cmd uint32, b []byte) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	conn.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, uintptr(cmd), uintptr(unsafePointer(b)))
	})
	if errno != 0 {
		return errno
	}
	return nil
}

func TestGPUConcurrentReadersEachWithOwnBuffer(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 6<<20 + 77
	for i := range 4 {
		srv.PutRandomObject(t, "data", fmt.Sprintf("o%d", i), size, int64(20+i))
	}
	mp, dir, d := gpuMount(t, srv, "data", nil)
	var bufs [8]string // made here: t.Fatal may not run in the readers' goroutines
	for w := range bufs {
		bufs[w] = hostBuffer(t, dir, fmt.Sprintf("b%d", w), size+1000, 0)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("o%d", w%4)
			buf := bufs[w]
			f, err := os.Open(filepath.Join(mp, key))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			for round := range 3 {
				res, err := s3gds.Read(f, hostRequest(buf, 0, size, uint64(round*100)))
				if err != nil || res.Bytes != size {
					errs <- fmt.Errorf("worker %d round %d: %+v %v", w, round, res, err)
					return
				}
				got, _ := os.ReadFile(filepath.Join(dir, buf))
				if sha256.Sum256(got[round*100:round*100+size]) != sha256.Sum256(testenv.RandomBytes(int64(20+w%4), 0, size)) {
					errs <- fmt.Errorf("worker %d round %d: bytes differ", w, round)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !settle(6*time.Second, func() bool { return d.GPU.Imports().OpenImports() == 0 }) {
		t.Fatal("timed out waiting: imports closed")
	}
}

// TestMain doubles as a helper process for tests that need a caller other
// than the test itself.
func TestMain(m *testing.M) {
	if os.Getenv("S3GDSFS_TEST_IOCTL_AS_CHILD") != "" {
		os.Exit(childIoctl())
	}
	if path := os.Getenv("S3GDSFS_TEST_MMAP_SHA256"); path != "" {
		os.Exit(childMmapSHA256(path))
	}
	restore := raisePipeLimitForSplice()
	code := m.Run()
	restore()
	os.Exit(code)
}

// pipeLimitWasEnv carries fs.pipe-max-size as it was into the test binary
// started again after raising it.
const pipeLimitWasEnv = "S3GDSFS_TEST_PIPE_MAX_SIZE_WAS"

// testMaxFuseRead is the largest FUSE read the tests mount with
// (TestLargeFuseReads): the pipes must hold its spliced replies.
const testMaxFuseRead = 4 << 20

// raisePipeLimitForSplice lets the splice tests splice: as root it raises
// fs.pipe-max-size where it is too small and starts the test binary again
// (go-fuse reads the limit once, when a program starts), and returns what
// puts the limit back.
func raisePipeLimitForSplice() (restore func()) {
	was := os.Getenv(pipeLimitWasEnv)
	if was == "" {
		raised, err := vfs.RaisePipeLimit(testMaxFuseRead)
		if err != nil || raised == "" {
			return func() {}
		}
		os.Setenv(pipeLimitWasEnv, raised)
		if err := syscall.Exec(os.Args[0], os.Args, os.Environ()); err != nil {
			fmt.Fprintln(os.Stderr, "starting the tests again after raising fs.pipe-max-size:", err)
		}
		was = raised
	}
	return func() {
		if err := os.WriteFile(vfs.PipeMaxSize, []byte(was), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "restoring fs.pipe-max-size:", err)
		}
	}
}

// childMmapSHA256 prints the sha256 of path read through a shared mapping.
// It runs in its own process: a page fault on a FUSE mapping waits for the
// daemon, and a daemon in the same process may be stopped by the Go
// runtime waiting for that very fault to end (a stop-the-world cannot
// preempt a thread inside a fault).
func childMmapSHA256(path string) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		if errors.Is(err, syscall.ENODEV) {
			return 3
		}
		return 2
	}
	defer syscall.Munmap(data)
	sum := sha256.Sum256(data)
	fmt.Println(hex.EncodeToString(sum[:]))
	return 0
}

// childIoctl issues one GPU read on fd 3 (inherited) and exits with the errno.
func childIoctl() int {
	f := os.NewFile(3, "inherited")
	length, dst := uint64(10), uint64(0)
	if v, err := strconv.ParseUint(os.Getenv("S3GDSFS_TEST_LENGTH"), 10, 64); err == nil {
		length = v
	}
	if v, err := strconv.ParseUint(os.Getenv("S3GDSFS_TEST_DST"), 10, 64); err == nil {
		dst = v
	}
	_, err := s3gds.Read(f, hostRequest(os.Getenv("S3GDSFS_TEST_BUF"), 0, length, dst))
	var en unix.Errno
	if errors.As(err, &en) {
		return int(en)
	}
	if err != nil {
		return 255
	}
	return 0
}

func TestGPUReadByCallerWithoutReadPermissionIsEACCES(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "secret", []byte("not for everyone"))
	mp, dir, _ := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.FS.FileMode = 0o440
		c.FS.UID, c.FS.GID = 0, 0
		c.FS.AllowOther = true // else the kernel refuses other users' ioctls itself
		c.GPU.StandinAllowOther = true
	})
	buf := hostBuffer(t, dir, "b", 4096, 0)
	os.Chmod(filepath.Join(dir, buf), 0o666)
	f, err := os.Open(filepath.Join(mp, "secret")) // root may open it...
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// ... and hands the descriptor to a process running as nobody.
	out, err := childIoctlAs(t, f, buf, &syscall.Credential{Uid: 65534, Gid: 65534})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || unix.Errno(ee.ExitCode()) != unix.EACCES {
		t.Fatalf("child as nobody: %v (%s), want exit with EACCES (%d)", err, out, unix.EACCES)
	}
}

// A caller in the file's group by a supplementary group may read(2) it, and
// so may read it into GPU memory.
func TestGPUReadBySupplementaryGroupMember(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutObject(t, "data", "shared", []byte("for the group"))
	const group = 4242
	mp, dir, _ := gpuMount(t, srv, "data", func(c *daemon.Config) {
		c.FS.FileMode = 0o440
		c.FS.UID, c.FS.GID = 0, group
		c.FS.AllowOther = true // else the kernel refuses other users' ioctls itself
		c.GPU.StandinAllowOther = true
	})
	buf := hostBuffer(t, dir, "b", 4096, 0)
	os.Chown(filepath.Join(dir, buf), 65534, 65534) // the stand-in writes only the caller's files
	f, err := os.Open(filepath.Join(mp, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := childIoctlAs(t, f, buf, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{group}})
	if err != nil {
		t.Fatalf("child as nobody with supplementary group %d: %v (%s), want success", group, err, out)
	}
	// The group bits, not the other bits, let it in: without the group it is refused.
	out, err = childIoctlAs(t, f, buf, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534}})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || unix.Errno(ee.ExitCode()) != unix.EACCES {
		t.Fatalf("child as nobody outside group %d: %v (%s), want exit with EACCES", group, err, out)
	}
}

// childIoctlAs runs childIoctl as cred on f (its fd 3), into the host
// buffer buf, and returns its output and how it exited.
func childIoctlAs(t *testing.T, f *os.File, buf string, cred *syscall.Credential) (string, error) {
	t.Helper()
	// The test binary lives in a directory only root may enter: copy it.
	exeDir, err := os.MkdirTemp("", "s3gdsfs-child-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(exeDir)
	os.Chmod(exeDir, 0o755)
	exe := filepath.Join(exeDir, "child")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(exe, b, 0o755) != nil {
		t.Fatalf("copy test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "S3GDSFS_TEST_IOCTL_AS_CHILD=1", "S3GDSFS_TEST_BUF="+buf)
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestPythonClientReadsIntoHostBuffer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	sum := srv.PutRandomObject(t, "data", "x/sample.bin", 5<<20+3, 31)
	mp, _, _ := gpuMount(t, srv, "data", func(c *daemon.Config) { c.GPU.StandinDir = "/dev/shm" })
	script := `
import hashlib, json, sys
import s3gds
path = sys.argv[1]
with s3gds.HostBuffer(6 << 20) as buf:
    r = s3gds.read_into(buf, path)
    data = buf.tobytes()[: r.nbytes]
print(json.dumps({"nbytes": r.nbytes, "transport": r.transport, "decline": r.decline_reason,
                  "sha256": hashlib.sha256(data).hexdigest(), "caps": s3gds.caps(path)["cuda_backend"],
                  "http": s3gds.stats(path)["counters"]["gpu_http_bytes"]}))
`
	cmd := exec.Command(py, "-c", script, filepath.Join(mp, "x", "sample.bin"))
	root, _ := filepath.Abs("..")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "client", "python"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python client: %v\n%s", err, out)
	}
	want := fmt.Sprintf(`{"nbytes": %d, "transport": "http", "decline": null, "sha256": "%s", "caps": "host-standin", "http": %d}`, 5<<20+3, sum, 5<<20+3)
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("python client said\n%s\nwant\n%s", out, want)
	}
}

// A daemon that sees a GPU readies it at start, in the background: the
// staging ring's first chunk is there before any GPU read, the mount's
// first POSIX read is served meanwhile, and a first GPU read finds it.
// With GPU.Prepare off nothing is pinned until the first GPU read.
func TestGPUPreparedAtStart(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 3<<20 + 5
	srv.PutRandomObject(t, "data", "obj", size, 61)
	want := sha256.Sum256(testenv.RandomBytes(61, 0, size))
	for _, prepare := range []bool{true, false} {
		t.Run(fmt.Sprintf("prepare=%v", prepare), func(t *testing.T) {
			// A ring of three chunks: prepared, all of it is pinned before
			// any GPU read; not, a read that needs a few slots pins one.
			const slot, slots = 1 << 20, 160
			mp, dir, d := gpuMount(t, srv, "data", func(c *daemon.Config) {
				c.GPU.Prepare = prepare
				c.GPU.Staging.SlotSize, c.GPU.Staging.Slots = slot, slots
			})
			got, err := os.ReadFile(filepath.Join(mp, "obj"))
			if err != nil || sha256.Sum256(got) != want {
				t.Fatalf("POSIX read: %d bytes, %v; want the object", len(got), err)
			}
			pinned := func() float64 { return metricAt(t, d, "gpu_staging_pinned_bytes", "") }
			if prepare {
				waitUntil(t, "the whole staging ring pinned before any GPU read", func() bool { return pinned() == slot*slots })
			} else {
				time.Sleep(200 * time.Millisecond)
				if p := pinned(); p != 0 {
					t.Fatalf("%v bytes pinned with GPU.Prepare off before any GPU read", p)
				}
			}
			buf := hostBuffer(t, dir, "dst", size, 0)
			f, err := os.Open(filepath.Join(mp, "obj"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if res, err := s3gds.Read(f, hostRequest(buf, 0, size, 0)); err != nil || res.Bytes != size {
				t.Fatalf("GPU read: %+v %v", res, err)
			}
			landed, err := os.ReadFile(filepath.Join(dir, buf))
			if err != nil || sha256.Sum256(landed) != want {
				t.Fatalf("GPU read landed bytes that differ from the object (%v)", err)
			}
			switch p := pinned(); {
			case prepare && p != slot*slots:
				t.Fatalf("%v bytes pinned after a GPU read of a prepared ring, want all %d", p, slot*slots)
			case !prepare && (p <= 0 || p >= slot*slots):
				t.Fatalf("%v bytes pinned after one small GPU read, want a chunk of the %d-byte ring", p, slot*slots)
			}
		})
	}
}
