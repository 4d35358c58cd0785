package s3gds

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/abi"
)

func objectContent(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestReadOnAFileOutsideS3gdsfs(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req := abi.NewReadRequest()
	req.Length = 1
	_, err = Read(f, &req)
	if !errors.Is(err, unix.ENOTTY) {
		t.Fatalf("Read on a plain file: %v, want ENOTTY", err)
	}
	if !strings.Contains(err.Error(), f.Name()) {
		t.Fatalf("error %q does not name the file", err)
	}
}

func TestReadThroughFUSE(t *testing.T) {
	content := objectContent(100_000)
	mnt := mountFakeDaemon(t, content)
	f, err := os.Open(filepath.Join(mnt, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	const bufSize = 64 << 10
	cases := []struct {
		name                      string
		offset, length, dstOffset uint64
		token                     string
		wantBytes                 uint64
		wantTransport             abi.Transport
		wantDecline               abi.Decline
	}{
		{name: "middle", offset: 1000, length: 5000, dstOffset: 3, wantBytes: 5000, wantTransport: abi.TransportHTTP},
		{name: "whole buffer", offset: 0, length: bufSize, wantBytes: bufSize, wantTransport: abi.TransportHTTP},
		{name: "short at EOF", offset: 99_000, length: 4096, dstOffset: 100, wantBytes: 1000, wantTransport: abi.TransportHTTP},
		{name: "past EOF", offset: 200_000, length: 4096, wantBytes: 0, wantTransport: abi.TransportNone},
		{name: "length 0", offset: 10, length: 0, wantBytes: 0, wantTransport: abi.TransportNone},
		{name: "token ignored", offset: 5, length: 10, token: strings.Repeat("a", 81),
			wantBytes: 10, wantTransport: abi.TransportHTTP, wantDecline: abi.DeclineTokenIgnored},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			buf := newHostBuffer(t, bufSize)
			req := abi.ReadRequest{Offset: c.offset, Length: c.length, DstOffset: c.dstOffset}
			if err := req.SetHostBufferName(buf); err != nil {
				t.Fatal(err)
			}
			if err := req.SetToken(c.token); err != nil {
				t.Fatal(err)
			}
			res, err := Read(f, &req)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if res.Bytes != c.wantBytes || res.HTTPBytes != c.wantBytes || res.RDMABytes != 0 ||
				res.Transport != c.wantTransport || res.Decline != c.wantDecline {
				t.Fatalf("result %+v, want %d bytes over %v, decline %v", res, c.wantBytes, c.wantTransport, c.wantDecline)
			}
			if res.Elapsed <= 0 {
				t.Errorf("elapsed %v", res.Elapsed)
			}
			if req.Bytes != res.Bytes || req.Transport != res.Transport {
				t.Errorf("req's out fields %d %v differ from the result", req.Bytes, req.Transport)
			}

			got, err := os.ReadFile(buf)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, bufSize)
			if c.wantBytes > 0 {
				copy(want[c.dstOffset:], content[c.offset:c.offset+c.wantBytes])
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the buffer does not hold object bytes [%d, %d) at %d and zeros elsewhere", c.offset, c.offset+c.wantBytes, c.dstOffset)
			}
		})
	}
}

func TestReadErrorsThroughFUSE(t *testing.T) {
	mnt := mountFakeDaemon(t, objectContent(4096))
	f, err := os.Open(filepath.Join(mnt, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := newHostBuffer(t, 1024)

	cases := []struct {
		name string
		req  func(r *abi.ReadRequest)
		want unix.Errno
	}{
		{"destination past the buffer", func(r *abi.ReadRequest) { r.DstOffset, r.Length = 1000, 100 }, unix.ERANGE},
		{"destination offset past the buffer", func(r *abi.ReadRequest) { r.DstOffset, r.Length = 2000, 0 }, unix.ERANGE},
		{"exclusive flags", func(r *abi.ReadRequest) { r.Flags |= abi.FlagRDMAOnly | abi.FlagHTTPOnly }, unix.EINVAL},
		{"reserved", func(r *abi.ReadRequest) { r.Reserved[0] = 1 }, unix.EINVAL},
		{"CUDA handle to a host stand-in daemon", func(r *abi.ReadRequest) { r.Flags &^= abi.FlagHostBuffer }, unix.EINVAL},
		{"missing buffer", func(r *abi.ReadRequest) { r.SetHostBufferName("/dev/shm/s3gds-no-such-buffer") }, unix.EBADF},
		{"decline is error", func(r *abi.ReadRequest) {
			r.Flags |= abi.FlagDeclineIsError
			r.SetToken(strings.Repeat("b", 81))
		}, unix.ECANCELED},
		{"rdma only", func(r *abi.ReadRequest) { r.Flags |= abi.FlagRDMAOnly }, unix.ECANCELED},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := abi.ReadRequest{Length: 16, Bytes: 99}
			if err := req.SetHostBufferName(buf); err != nil {
				t.Fatal(err)
			}
			c.req(&req)
			res, err := Read(f, &req)
			if !errors.Is(err, c.want) {
				t.Fatalf("Read: %v, want %v", err, c.want)
			}
			if res != (Result{}) || req.Bytes != 99 {
				t.Fatalf("a failed read reported %+v and set bytes to %d", res, req.Bytes)
			}
		})
	}
}

func TestXattrsThroughFUSE(t *testing.T) {
	mnt := mountFakeDaemon(t, objectContent(4096))
	obj := filepath.Join(mnt, "obj")

	caps, err := Caps(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if caps.ABIVersion != abi.Version || caps.CUDABackend != abi.CUDABackendHostStandin ||
		len(caps.Devices) != 1 || caps.Devices[0].Name != "host-standin" || caps.RDMA.Fabric != "none" {
		t.Fatalf("caps %+v", caps)
	}

	etag, err := ETag(obj)
	if err != nil || etag != fakeETag {
		t.Fatalf("ETag = %q, %v", etag, err)
	}
	if _, err := ETag(mnt); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("ETag of the root: %v, want ENODATA", err)
	}

	// One read, whose token was declined, shows up in the statistics.
	f, err := os.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req := abi.ReadRequest{Length: 8}
	req.SetHostBufferName(newHostBuffer(t, 8))
	req.SetToken("t")
	if _, err := Read(f, &req); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{obj, mnt} {
		stats, err := Stats(path)
		if err != nil {
			t.Fatal(err)
		}
		declined, _ := stats["declined"].(map[string]any)
		if stats["gpu_reads"] != 1.0 || declined["token_ignored"] != 1.0 || stats["host"] != "fake" {
			t.Fatalf("Stats(%s) = %v", path, stats)
		}
	}
}

// TestPythonClientThroughFUSE runs client/python's tests that need a mount
// against the fake daemon.
func TestPythonClientThroughFUSE(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	mnt := mountFakeDaemon(t, objectContent(300_000))
	cmd := exec.Command(python, "-m", "unittest", "-v", "tests.test_mounted")
	cmd.Dir = filepath.Join("..", "..", "python")
	cmd.Env = append(os.Environ(), "S3GDS_TEST_MOUNT="+mnt)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("python tests skipped with a mount present:\n%s", out)
	}
	t.Logf("%s", out)
}
