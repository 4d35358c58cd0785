package integration

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// gpuWritable mounts bucket with the host stand-in and writes allowed, in
// parts of 8 MiB (slots of 1 MiB: gpuMount).
func gpuWritable(t *testing.T, srv *testenv.Server, bucket string, tune func(*daemon.Config)) (mp, bufDir string, d *daemon.Daemon) {
	t.Helper()
	return gpuMount(t, srv, bucket, func(c *daemon.Config) {
		c.Core.Writes.Allow = true
		c.Core.Writes.PartSize = 8 << 20
		c.Core.Writes.PartsInFlight = 3
		if tune != nil {
			tune(c)
		}
	})
}

// srcBuffer makes a stand-in buffer holding data at srcOff, 0xEE around it.
func srcBuffer(t *testing.T, dir, name string, data []byte, srcOff, size int) string {
	t.Helper()
	buf := hostBuffer(t, dir, name, size, 0xEE)
	f, err := os.OpenFile(filepath.Join(dir, buf), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, int64(srcOff)); err != nil {
		t.Fatal(err)
	}
	return buf
}

// A file written from a device buffer in several ioctls, after a few
// bytes of write(2) into the same upload: S3 holds exactly the bytes, in
// multipart parts, and the bytes are counted by the path they came by.
func TestGPUWriteLandsInS3ByteExact(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, dir, d := gpuWritable(t, srv, "data", nil)
	const size = 21<<20 + 777 // three parts, the last short; not a multiple of the slot
	const posix = 1000
	const srcOff = 4096 + 5
	data := testenv.RandomBytes(21, 0, size)
	buf := srcBuffer(t, dir, "src", data[posix:], srcOff, srcOff+size)

	f, err := os.Create(filepath.Join(mp, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data[:posix]); err != nil {
		t.Fatal(err)
	}
	// The kernel now holds the size write(2) made, and sees none of the
	// ioctls' bytes.
	if fi, err := os.Stat(filepath.Join(mp, "ckpt.bin")); err != nil || fi.Size() != posix {
		t.Fatalf("stat after write(2): %v, %v; want %d bytes", fi, err, posix)
	}
	// Uneven pieces: one within a slot, one across parts, the rest.
	off := uint64(posix)
	for _, n := range []uint64{300 << 10, 11<<20 + 3, size - posix - (300 << 10) - (11<<20 + 3)} {
		res, err := s3gds.Write(f, hostRequest(buf, off, n, srcOff+off-posix))
		if err != nil {
			t.Fatalf("write of %d bytes at %d: %v", n, off, err)
		}
		if res.Bytes != n || res.HTTPBytes != n || res.Transport != abi.TransportHTTP {
			t.Fatalf("write of %d bytes at %d: %+v", n, off, res)
		}
		off += n
	}
	// In order only: back to the start, or past the end, is EINVAL.
	for _, at := range []uint64{0, off + 1, 1 << 63} {
		if _, err := s3gds.Write(f, hostRequest(buf, at, 10, 0)); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("write at %d after %d bytes: %v, want EINVAL", at, off, err)
		}
	}
	// A zero-length write at the end takes nothing and is no error.
	if res, err := s3gds.Write(f, hostRequest(buf, off, 0, 0)); err != nil || res.Bytes != 0 {
		t.Errorf("zero-length write: %+v %v", res, err)
	}
	// A file being written shows the bytes written so far, the ioctls' too.
	if fi, err := os.Stat(filepath.Join(mp, "ckpt.bin")); err != nil || fi.Size() != int64(off) {
		t.Errorf("stat while written: %v, %v; want %d bytes", fi, err, off)
	}
	if d.GPU.Imports().OpenImports() != 1 {
		t.Fatalf("open imports %d while the file is open, want 1 (reused)", d.GPU.Imports().OpenImports())
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The writer's import goes with its last file, as a reader's does.
	if !settle(6*time.Second, func() bool { return d.GPU.Imports().OpenImports() == 0 }) {
		t.Fatal("timed out waiting: imports closed after the file was closed")
	}
	if got, want := s3SHA256(t, srv, "data", "ckpt.bin"), sum(data); got != want {
		t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
	}
	if got, err := os.ReadFile(filepath.Join(mp, "ckpt.bin")); err != nil || sum(got) != sum(data) {
		t.Fatalf("read back through the mount: %d bytes, %v; wrote %d", len(got), err, len(data))
	}
	if n := metricAt(t, d, "s3_requests_total", "upload_part,ok"); n != 3 {
		t.Errorf("%v parts uploaded, want 3", n)
	}
	if n := metricAt(t, d, "write_bytes_total", "gpu_http"); n != size-posix {
		t.Errorf("write_bytes_total{gpu_http} %v, want %d", n, size-posix)
	}
	if n := metricAt(t, d, "write_bytes_total", "posix"); n != posix {
		t.Errorf("write_bytes_total{posix} %v, want %d", n, posix)
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Errorf("multipart uploads left open: %v", left)
	}
}

// The write ioctl needs a file open for writing on a mount with writes,
// and a source range inside the buffer.
func TestGPUWriteRefusalsAnswerTheirErrno(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 1<<20, 3)

	t.Run("read_only_mount", func(t *testing.T) {
		mp, dir, _ := gpuMount(t, srv, "data", nil)
		buf := hostBuffer(t, dir, "b", 1<<20, 1)
		f, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := s3gds.Write(f, hostRequest(buf, 0, 10, 0)); !errors.Is(err, syscall.EROFS) {
			t.Fatalf("write ioctl on a mount without writes: %v, want EROFS", err)
		}
	})

	t.Run("writable_mount", func(t *testing.T) {
		mp, dir, _ := gpuWritable(t, srv, "data", nil)
		buf := hostBuffer(t, dir, "b", 1<<20, 1)
		ro, err := os.Open(filepath.Join(mp, "obj"))
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		if _, err := s3gds.Write(ro, hostRequest(buf, 0, 10, 0)); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("write ioctl on a read-only open: %v, want EBADF", err)
		}
		w, err := os.Create(filepath.Join(mp, "new.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s3gds.Read(w, hostRequest(buf, 0, 10, 0)); !errors.Is(err, syscall.EBADF) {
			t.Errorf("read ioctl on a write-only open: %v, want EBADF", err)
		}
		for name, c := range map[string]struct {
			req  *abi.ReadRequest
			want syscall.Errno
		}{
			"source past the buffer":    {hostRequest(buf, 0, 1<<20+1, 0), syscall.ERANGE},
			"source offset past it":     {hostRequest(buf, 0, 1, 1<<20), syscall.ERANGE},
			"buffer that does not open": {hostRequest("no-such-buffer", 0, 10, 0), syscall.EBADF},
		} {
			if _, err := s3gds.Write(w, c.req); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", name, err, c.want)
			}
		}
		// Nothing refused was written: the file is still empty, and writes on.
		if res, err := s3gds.Write(w, hostRequest(buf, 0, 10, 0)); err != nil || res.Bytes != 10 {
			t.Fatalf("write after refusals: %+v %v", res, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got, want := s3SHA256(t, srv, "data", "new.bin"), sum([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}); got != want {
			t.Fatalf("S3 holds sha256 %s, want %s", got, want)
		}
	})
}

// Parts that fail mid-upload: the writes (or the close) fail, close answers
// EIO, and S3 shows neither an object nor an open multipart upload.
func TestGPUWriteFaultMidUploadLeavesNothing(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	isPart := func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Has("partNumber")
	}
	proxy, err := faultproxy.Start(srv.Endpoint, faultproxy.Config{Seed: 1, Rate: 0, Kinds: []faultproxy.Kind{faultproxy.Status500}, Match: isPart})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	mp, dir, d := gpuWritable(t, srv, "data", func(c *daemon.Config) { c.S3.Endpoint = proxy.URL })
	const size = 40 << 20
	data := testenv.RandomBytes(9, 0, size)
	buf := srcBuffer(t, dir, "src", data, 0, size)
	f, err := os.Create(filepath.Join(mp, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s3gds.Write(f, hostRequest(buf, 0, 12<<20, 0)); err != nil || res.Bytes != 12<<20 {
		t.Fatalf("first write: %+v %v", res, err)
	}
	proxy.SetRate(1) // every part from now on, and its retries
	var werr error
	for off := uint64(12 << 20); off < size; {
		res, err := s3gds.Write(f, hostRequest(buf, off, size-off, off))
		if err != nil {
			werr = err
			break
		}
		if res.Bytes == 0 {
			t.Fatalf("write at %d took nothing and failed not", off)
		}
		off += res.Bytes
	}
	cerr := f.Close()
	if !errors.Is(cerr, syscall.EIO) {
		t.Fatalf("close: %v (write: %v), want EIO", cerr, werr)
	}
	if werr != nil && !errors.Is(werr, syscall.EIO) {
		t.Errorf("write: %v, want success or EIO", werr)
	}
	if proxy.Injected() == 0 {
		t.Fatal("no fault was injected")
	}
	if s3Exists(t, srv, "data", "ckpt.bin") {
		t.Fatal("a failed upload left an object")
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Fatalf("multipart uploads left open: %v", left)
	}
	if _, err := os.Stat(filepath.Join(mp, "ckpt.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount shows the failed file: %v", err)
	}
	if n := metricAt(t, d, "uploads_total", "aborted"); n != 1 {
		t.Errorf("uploads aborted %v, want 1", n)
	}
}

// The Python client writes a host stand-in buffer into a new file by path
// (created, written, closed: the object is in S3 on return), and into an
// open descriptor after bytes of write(2), its position kept in step.
func TestPythonClientWritesFromHostBuffer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, _, d := gpuWritable(t, srv, "data", func(c *daemon.Config) { c.GPU.StandinDir = "/dev/shm" })
	const size = 9<<20 + 17
	data := testenv.RandomBytes(41, 0, size)
	src := filepath.Join(t.TempDir(), "src.bin")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `
import json, os, sys
import s3gds
src, mp = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
out = {}
with s3gds.HostBuffer(len(data) + 100) as buf:
    buf.view()[100:] = data
    r = s3gds.write_from(buf, os.path.join(mp, "a.bin"), src_offset=100)
    out["path"] = [r.nbytes, r.offset]
    fd = os.open(os.path.join(mp, "b.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, data[:1000])
    r = s3gds.write_from(buf, fd, len(data) - 2000, src_offset=1100)
    os.write(fd, data[-1000:])
    out["fd"] = [r.nbytes, r.offset, os.lseek(fd, 0, os.SEEK_CUR)]
    os.close(fd)
    try:
        s3gds.write_from(buf, os.open(os.path.join(mp, "a.bin"), os.O_RDONLY), 10)
    except OSError as e:
        out["ro"] = e.errno
print(json.dumps(out))
`
	cmd := exec.Command(py, "-c", script, src, mp)
	root, _ := filepath.Abs("..")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "client", "python"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python client: %v\n%s", err, out)
	}
	want := fmt.Sprintf(`{"path": [%d, %d], "fd": [%d, %d, %d], "ro": %d}`, size, size, size-2000, size-1000, size, int(syscall.EBADF))
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("python client said\n%s\nwant\n%s", out, want)
	}
	for _, key := range []string{"a.bin", "b.bin"} {
		if got, want := s3SHA256(t, srv, "data", key), sum(data); got != want {
			t.Errorf("S3 %s holds sha256 %s, wrote %s", key, got, want)
		}
	}
	if n := metricAt(t, d, "write_bytes_total", "gpu_http"); n != 2*size-2000 {
		t.Errorf("write_bytes_total{gpu_http} %v, want %d", n, 2*size-2000)
	}
}

// A staging ring of one slot: the write holds its only slot while the
// file takes the bytes, and must not wait for a second one to copy the
// next bytes ahead.
func TestGPUWriteThroughARingOfOneSlot(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, dir, _ := gpuWritable(t, srv, "data", func(c *daemon.Config) { c.GPU.Staging.Slots = 1 })
	const size = 3<<20 + 9
	data := testenv.RandomBytes(5, 0, size)
	buf := srcBuffer(t, dir, "src", data, 0, size)
	f, err := os.Create(filepath.Join(mp, "one.bin"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res s3gds.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s3gds.Write(f, hostRequest(buf, 0, size, 0))
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.res.Bytes != size {
			t.Fatalf("write: %+v %v", r.res, r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the write did not finish in a minute: it waits for a slot it holds")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := s3SHA256(t, srv, "data", "one.bin"), sum(data); got != want {
		t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
	}
}
