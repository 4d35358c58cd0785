package integration

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// books checks that the counters balance: every delivered byte is counted
// once, as RDMA or as HTTP, and declined bytes are part of the HTTP bytes.
func books(t *testing.T, d *daemon.Daemon, wantRDMA, wantHTTP, wantDeclined float64, reason string) {
	t.Helper()
	snap, err := d.Metrics.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	by := snap["gpu_read_bytes_total"].(map[string]float64)
	declined := snap["gpu_declined_bytes_total"].(map[string]float64)
	var allDeclined float64
	for _, v := range declined {
		allDeclined += v
	}
	if by["rdma"] != wantRDMA || by["http"] != wantHTTP {
		t.Errorf("bytes rdma=%v http=%v, want rdma=%v http=%v", by["rdma"], by["http"], wantRDMA, wantHTTP)
	}
	if allDeclined != wantDeclined || (reason != "" && declined[reason] != wantDeclined) {
		t.Errorf("declined bytes %v (%v), want %v as %s", allDeclined, declined, wantDeclined, reason)
	}
	if allDeclined > by["http"] {
		t.Errorf("declined bytes %v exceed HTTP bytes %v", allDeclined, by["http"])
	}
}

func TestLoopbackRDMAEndToEndAndEveryDecline(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 3<<20 + 999
	srv.PutRandomObject(t, "data", "obj", size, 41)
	want := sha256.Sum256(testenv.RandomBytes(41, 0, size))

	cases := []struct {
		mode    loopback.Mode
		decline abi.Decline
		rdma    int64 // bytes the fabric writes before declining; -1: some, not all
	}{
		{loopback.Normal, abi.DeclineNone, size},
		{loopback.Decline501, abi.DeclineServer501, 0},
		{loopback.IgnoreToken, abi.DeclineTokenIgnored, 0},
		{loopback.FailRegistration, abi.DeclineRegistrationFailed, 0},
		{loopback.RejectToken, abi.DeclineTokenRejected, 0},
		{loopback.ShortTransfer, abi.DeclineShortTransfer, -1},
		// A fabric that holds its reply past the read timeout: given up,
		// the bytes go over HTTP.
		{loopback.Stall, abi.DeclineTimeout, 0},
	}
	for _, c := range cases {
		t.Run(c.decline.String(), func(t *testing.T) {
			fabric := loopback.NewFabric()
			mp, dir, d := gpuMount(t, srv, "data", func(cfg *daemon.Config) {
				cfg.GPU.RDMA = "loopback"
				cfg.Read.ReadTimeout = 2 * time.Second
			}, mounttest.Fabric(fabric))
			fabric.SetMode(c.mode)
			fabric.SetStall(time.Minute)
			f, err := os.Open(filepath.Join(mp, "obj"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := hostBuffer(t, dir, "buf", size+4096, 0)
			start := time.Now()
			res, err := s3gds.Read(f, hostRequest(buf, 0, size, 4096))
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("the read took %v: a stalled transfer was not given up", took)
			}
			got, err := os.ReadFile(filepath.Join(dir, buf))
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(got[4096:4096+size]) != want {
				t.Fatal("bytes in the buffer differ from the object")
			}
			if res.Bytes != size || res.RDMABytes+res.HTTPBytes != size || res.Decline != c.decline {
				t.Fatalf("result %+v, want %d bytes, decline %s", res, size, c.decline)
			}
			if c.rdma >= 0 && int64(res.RDMABytes) != c.rdma {
				t.Fatalf("rdma bytes %d, want %d", res.RDMABytes, c.rdma)
			}
			if c.rdma < 0 && (res.RDMABytes == 0 || res.RDMABytes >= size) {
				t.Fatalf("rdma bytes %d of %d, want a part of them (the rest over HTTP)", res.RDMABytes, size)
			}
			wantTransport := abi.TransportHTTP
			if c.decline == abi.DeclineNone {
				wantTransport = abi.TransportRDMA
			}
			if res.Transport != wantTransport {
				t.Fatalf("transport %s, want %s", res.Transport, wantTransport)
			}
			reason := ""
			if c.decline != abi.DeclineNone {
				reason = c.decline.String()
			}
			books(t, d, float64(res.RDMABytes), float64(res.HTTPBytes), float64(res.HTTPBytes), reason)
			if c.decline == abi.DeclineNone {
				caps, err := s3gds.Caps(mp)
				if err != nil || caps.RDMA.Fabric != "loopback" || caps.RDMA.Minter != "loopback" {
					t.Fatalf("caps %+v %v: want the loopback fabric named", caps.RDMA, err)
				}
			}
		})
	}
}

func TestDeclineIsErrorFailsInsteadOfFallingBack(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	srv.PutRandomObject(t, "data", "obj", 1<<20, 42)
	fabric := loopback.NewFabric()
	mp, dir, d := gpuMount(t, srv, "data", func(cfg *daemon.Config) { cfg.GPU.RDMA = "loopback" }, mounttest.Fabric(fabric))
	fabric.SetMode(loopback.Decline501)
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", 1<<20, 0)
	r := hostRequest(buf, 0, 1<<20, 0)
	r.Flags |= abi.FlagDeclineIsError
	if _, err := s3gds.Read(f, r); !errors.Is(err, unix.ECANCELED) {
		t.Fatalf("decline with decline_is_error: %v, want ECANCELED", err)
	}
	// HTTP only never asks for RDMA: not a decline.
	r = hostRequest(buf, 0, 1<<20, 0)
	r.Flags |= abi.FlagHTTPOnly
	res, err := s3gds.Read(f, r)
	if err != nil || res.Decline != abi.DeclineNone || res.Transport != abi.TransportHTTP {
		t.Fatalf("http_only read: %+v %v", res, err)
	}
	books(t, d, 0, 1<<20, 0, "")
	snap, _ := d.Metrics.Snapshot()
	if n := snap["gpu_declined_total"].(map[string]float64)["server_501"]; n != 1 {
		t.Fatalf("server_501 declines %v, want 1 (the refused read)", n)
	}
}

func TestVersitygwIgnoresTokensAndBytesStillLand(t *testing.T) {
	srv := testenv.Start(t)
	srv.CreateBucket(t, "data")
	const size = 2<<20 + 5
	srv.PutRandomObject(t, "data", "obj", size, 43)
	// No fabric: a caller's token goes to versitygw, which ignores it and
	// sends the body.
	mp, dir, d := gpuMount(t, srv, "data", nil)
	f, err := os.Open(filepath.Join(mp, "obj"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := hostBuffer(t, dir, "buf", size, 0)
	r := hostRequest(buf, 0, size, 0)
	tok := rdmatoken.Token{Addr: 0x7f0000000000, Size: size, RKey: 7, LID: 1, DCT: 9}
	copy(r.RDMAToken[:], tok.String())
	res, err := s3gds.Read(f, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decline != abi.DeclineTokenIgnored || res.HTTPBytes != size || res.RDMABytes != 0 {
		t.Fatalf("result %+v, want token_ignored with every byte over HTTP", res)
	}
	got, _ := os.ReadFile(filepath.Join(dir, buf))
	if sha256.Sum256(got) != sha256.Sum256(testenv.RandomBytes(43, 0, size)) {
		t.Fatal("bytes differ")
	}
	books(t, d, 0, size, size, "token_ignored")

	// A token alone, with no buffer to write through: the decline is
	// reported and the caller falls back itself.
	tr := abi.NewReadRequest()
	tr.Length = size
	copy(tr.RDMAToken[:], tok.String())
	res, err = s3gds.Read(f, &tr)
	if err != nil || res.Bytes != 0 || res.Decline != abi.DeclineTokenIgnored {
		t.Fatalf("token-only read: %+v %v; want 0 bytes and token_ignored", res, err)
	}
	// A malformed token is rejected before anything is sent.
	bad := abi.NewReadRequest()
	bad.Length = size
	copy(bad.RDMAToken[:], fmt.Sprintf("%081d", 1))
	res, err = s3gds.Read(f, &bad)
	if err != nil || res.Decline != abi.DeclineTokenRejected {
		t.Fatalf("malformed token: %+v %v; want token_rejected", res, err)
	}
}
