package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
)

const rdmaPart = 8 << 20 // gpuWritable's part size

// rdmaWritable mounts bucket writable with the host stand-in and the
// loopback fabric f in front of versitygw.
func rdmaWritable(t *testing.T, srv *testenv.Server, bucket string, f *loopback.Fabric, tune func(*daemon.Config)) (mp, bufDir string, d *daemon.Daemon) {
	t.Helper()
	return gpuMount(t, srv, bucket, func(c *daemon.Config) {
		c.Core.Writes.Allow = true
		c.Core.Writes.PartSize = rdmaPart
		c.Core.Writes.PartsInFlight = 3
		c.GPU.RDMA = "loopback"
		if tune != nil {
			tune(c)
		}
	}, mounttest.Fabric(f))
}

// writeBooks checks the write counters: bytes by path, and declined parts
// and their bytes by reason.
func writeBooks(t *testing.T, d *daemon.Daemon, rdma, http float64, reason string, declined, declinedBytes float64) {
	t.Helper()
	if got := metricAt(t, d, "write_bytes_total", "gpu_rdma"); got != rdma {
		t.Errorf("write_bytes_total{gpu_rdma} %v, want %v", got, rdma)
	}
	if got := metricAt(t, d, "write_bytes_total", "gpu_http"); got != http {
		t.Errorf("write_bytes_total{gpu_http} %v, want %v", got, http)
	}
	snap, err := d.Metrics.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var n, b float64
	for _, v := range snap["gpu_write_declined_total"].(map[string]float64) {
		n += v
	}
	for _, v := range snap["gpu_write_declined_bytes_total"].(map[string]float64) {
		b += v
	}
	if n != declined || b != declinedBytes {
		t.Errorf("write declines %v (%v bytes), want %v (%v bytes)", snap["gpu_write_declined_total"], b, declined, declinedBytes)
	}
	if reason != "" {
		if got := metricAt(t, d, "gpu_write_declined_total", reason); got != declined {
			t.Errorf("gpu_write_declined_total{%s} %v, want %v", reason, got, declined)
		}
	}
}

// A GPU write of whole parts goes as RDMA UploadParts: the fabric reads
// each part out of the buffer, S3 holds the bytes exactly, and no byte
// was copied through pinned staging.
func TestGPUWriteWholePartsOverRDMA(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	fabric := loopback.NewFabric()
	mp, dir, d := rdmaWritable(t, srv, "data", fabric, nil)
	const size = 3 * rdmaPart
	const srcOff = 4096 + 3
	data := testenv.RandomBytes(31, 0, size)
	buf := srcBuffer(t, dir, "src", data, srcOff, srcOff+size+100)

	f, err := os.Create(filepath.Join(mp, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s3gds.Write(f, hostRequest(buf, 0, size, srcOff))
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != size || res.RDMABytes != size || res.HTTPBytes != 0 || res.Transport != abi.TransportRDMA || res.Decline != abi.DeclineNone {
		t.Fatalf("result %+v, want %d bytes over RDMA", res, size)
	}
	if fi, err := os.Stat(filepath.Join(mp, "ckpt.bin")); err != nil || fi.Size() != size {
		t.Errorf("stat while written: %v, %v; want %d bytes", fi, err, size)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got, want := s3SHA256(t, srv, "data", "ckpt.bin"), sum(data); got != want {
		t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
	}
	if got, err := os.ReadFile(filepath.Join(mp, "ckpt.bin")); err != nil || sum(got) != sum(data) {
		t.Fatalf("read back through the mount: %d bytes, %v", len(got), err)
	}
	writeBooks(t, d, size, 0, "", 0, 0)
	if n := metricAt(t, d, "s3_requests_total", "upload_part_rdma,served"); n != 3 {
		t.Errorf("%v RDMA parts served, want 3", n)
	}
	if n := metricAt(t, d, "s3_requests_total", "upload_part,ok"); n != 0 {
		t.Errorf("%v parts over HTTP, want 0", n)
	}
	if st := fabric.Stats(); st.PutsServed != 3 || st.ServedBytes != size {
		t.Errorf("fabric %+v, want 3 PUTs of %d bytes", st, size)
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Errorf("multipart uploads left open: %v", left)
	}
	if !settle(6*time.Second, func() bool { return d.GPU.Imports().OpenImports() == 0 }) {
		t.Error("timed out waiting: the writer's import closed after the file was closed")
	}
}

// A write that is not part-aligned: the bytes up to the first part
// boundary and after the last whole part go through pinned staging into
// the upload's own parts, the whole parts between over RDMA, in order.
func TestGPUWriteNotPartAlignedMixesRDMAAndHTTP(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	fabric := loopback.NewFabric()
	mp, dir, d := rdmaWritable(t, srv, "data", fabric, nil)
	const posix = 1000
	const size = 3*rdmaPart + 5<<20 + 777 // the file
	data := testenv.RandomBytes(32, 0, size)
	buf := srcBuffer(t, dir, "src", data[posix:], 0, size-posix)

	f, err := os.Create(filepath.Join(mp, "mixed.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data[:posix]); err != nil {
		t.Fatal(err)
	}
	// Up to the boundary and one whole part, then the rest: two whole
	// parts and a short last one.
	first := uint64(2*rdmaPart - posix)
	res, err := s3gds.Write(f, hostRequest(buf, posix, first, 0))
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != first || res.RDMABytes != rdmaPart || res.HTTPBytes != rdmaPart-posix || res.Transport != abi.TransportHTTP {
		t.Fatalf("first write: %+v, want %d bytes of which one part over RDMA", res, first)
	}
	rest := uint64(size) - posix - first
	res, err = s3gds.Write(f, hostRequest(buf, posix+first, rest, first))
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != rest || res.RDMABytes != rdmaPart || res.HTTPBytes != rest-rdmaPart {
		t.Fatalf("second write: %+v, want %d bytes of which one part over RDMA", res, rest)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got, want := s3SHA256(t, srv, "data", "mixed.bin"), sum(data); got != want {
		t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
	}
	writeBooks(t, d, 2*rdmaPart, size-posix-2*rdmaPart, "", 0, 0)
	if n := metricAt(t, d, "s3_requests_total", "upload_part_rdma,served"); n != 2 {
		t.Errorf("%v RDMA parts, want 2", n)
	}
	if n := metricAt(t, d, "s3_requests_total", "upload_part,ok"); n != 2 {
		t.Errorf("%v parts over HTTP, want 2 (the first and the last)", n)
	}
}

// Each way the fabric fails declines the part; its bytes go over HTTP
// from the same buffer and land byte for byte, and the decline is counted
// by reason. A part a declining server stored (an empty one, a short one)
// is replaced.
func TestGPUWriteRDMADeclinesFallBackToHTTP(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 2 * rdmaPart
	data := testenv.RandomBytes(33, 0, size)
	for _, c := range []struct {
		mode    loopback.Mode
		decline abi.Decline
	}{
		{loopback.Decline501, abi.DeclineServer501},
		{loopback.IgnoreToken, abi.DeclineTokenIgnored},
		{loopback.FailRegistration, abi.DeclineRegistrationFailed},
		{loopback.RejectToken, abi.DeclineTokenRejected},
		{loopback.ShortTransfer, abi.DeclineShortTransfer},
		{loopback.Stall, abi.DeclineTimeout},
	} {
		t.Run(c.decline.String(), func(t *testing.T) {
			fabric := loopback.NewFabric()
			mp, dir, d := rdmaWritable(t, srv, "data", fabric, func(cfg *daemon.Config) { cfg.Read.ReadTimeout = 2 * time.Second })
			fabric.SetMode(c.mode)
			fabric.SetStall(time.Minute)
			buf := srcBuffer(t, dir, "src", data, 0, size)
			name := "declined-" + c.decline.String()
			f, err := os.Create(filepath.Join(mp, name))
			if err != nil {
				t.Fatal(err)
			}
			res, err := s3gds.Write(f, hostRequest(buf, 0, size, 0))
			if err != nil {
				t.Fatal(err)
			}
			if res.Bytes != size || res.RDMABytes != 0 || res.HTTPBytes != size || res.Decline != c.decline || res.Transport != abi.TransportHTTP {
				t.Fatalf("result %+v, want every byte over HTTP, declined as %s", res, c.decline)
			}
			if err := f.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if got, want := s3SHA256(t, srv, "data", name), sum(data); got != want {
				t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
			}
			writeBooks(t, d, 0, size, c.decline.String(), 2, size)
			if left := openUploads(t, srv, "data"); len(left) != 0 {
				t.Errorf("multipart uploads left open: %v", left)
			}
		})
	}
}

// RDMA_ONLY: a part RDMA cannot carry fails the call with ECANCELED, as a
// read's does, and fails the file: close answers EIO, nothing is visible,
// and no multipart upload is left open. HTTP_ONLY never asks for RDMA.
func TestGPUWriteRDMAOnlyFailsInsteadOfFallingBack(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	fabric := loopback.NewFabric()
	mp, dir, d := rdmaWritable(t, srv, "data", fabric, nil)
	const size = 2 * rdmaPart
	data := testenv.RandomBytes(34, 0, size)
	buf := srcBuffer(t, dir, "src", data, 0, size)

	fabric.SetMode(loopback.Decline501)
	f, err := os.Create(filepath.Join(mp, "only.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r := hostRequest(buf, 0, size, 0)
	r.Flags |= abi.FlagRDMAOnly
	if _, err := s3gds.Write(f, r); !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("rdma_only write with a declining server: %v, want ECANCELED", err)
	}
	if err := f.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("close after the failed write: %v, want EIO", err)
	}
	if _, err := srv.Client.StatObject(context.Background(), "data", "only.bin", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatalf("the object after a failed write: %v, want NoSuchKey", err)
	}
	if left := openUploads(t, srv, "data"); len(left) != 0 {
		t.Errorf("multipart uploads left open: %v", left)
	}
	if n := metricAt(t, d, "gpu_write_declined_total", "server_501"); n < 1 {
		t.Errorf("server_501 write declines %v, want at least 1", n)
	}
	if n := metricAt(t, d, "upload_part_retries_total", ""); n != 0 {
		t.Errorf("%v upload retries: a declined part is not retried", n)
	}

	// HTTP_ONLY with the fabric serving: no RDMA asked for, no decline.
	fabric.SetMode(loopback.Normal)
	f, err = os.Create(filepath.Join(mp, "http.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r = hostRequest(buf, 0, size, 0)
	r.Flags |= abi.FlagHTTPOnly
	res, err := s3gds.Write(f, r)
	if err != nil || res.HTTPBytes != size || res.RDMABytes != 0 || res.Decline != abi.DeclineNone {
		t.Fatalf("http_only write: %+v %v", res, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := s3SHA256(t, srv, "data", "http.bin"), sum(data); got != want {
		t.Fatalf("S3 holds sha256 %s, wrote %s", got, want)
	}
}

// RDMA_ONLY on a mount without RDMA: ECANCELED before a byte is taken,
// and the file writes on.
func TestGPUWriteRDMAOnlyWithoutRDMA(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	mp, dir, d := gpuWritable(t, srv, "data", nil)
	buf := hostBuffer(t, dir, "b", 1<<20, 7)
	f, err := os.Create(filepath.Join(mp, "x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r := hostRequest(buf, 0, 1<<20, 0)
	r.Flags |= abi.FlagRDMAOnly
	if _, err := s3gds.Write(f, r); !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("rdma_only write without RDMA: %v, want ECANCELED", err)
	}
	if n := metricAt(t, d, "gpu_write_declined_total", "rdma_unavailable"); n != 1 {
		t.Errorf("rdma_unavailable write declines %v, want 1", n)
	}
	if res, err := s3gds.Write(f, hostRequest(buf, 0, 1<<20, 0)); err != nil || res.Bytes != 1<<20 {
		t.Fatalf("a write after the refusal: %+v %v", res, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
