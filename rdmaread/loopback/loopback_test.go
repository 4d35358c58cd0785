package loopback

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/cufile/hoststandin"
	"github.com/s3gdsfs/s3gdsfs/internal/faultproxy"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

const (
	bucket  = "loop"
	key     = "dir/object.bin"
	objSize = 5<<20 + 123
	seed    = 7
	bufSize = 8 << 20
)

// rig is a real versitygw, the loopback fabric in front of it, a store
// pointed at the fabric and a host stand-in buffer to read into.
type rig struct {
	srv     *testenv.Server
	fabric  *Fabric
	server  *Server
	store   *objstore.Minio
	direct  *objstore.Minio // straight to versitygw
	tokens  *mint.TokenCache
	alloc   cufile.Allocation
	bufPath string
	version objstore.Version
}

func newRig(t *testing.T) *rig { return newRigVia(t, nil) }

// newRigVia is newRig with the fabric's upstream given by via, from
// versitygw's endpoint (nil: versitygw itself).
func newRigVia(t *testing.T, via func(endpoint string) string) *rig {
	t.Helper()
	srv := testenv.Start(t)
	srv.CreateBucket(t, bucket)
	srv.PutRandomObject(t, bucket, key, objSize, seed)

	dir := t.TempDir()
	bufPath := filepath.Join(dir, "gpu0")
	if err := os.WriteFile(bufPath, make([]byte, bufSize), 0o600); err != nil {
		t.Fatal(err)
	}
	backend, err := hoststandin.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var h cufile.Handle
	copy(h[:], "gpu0")
	alloc, err := backend.Import(0, h)
	if err != nil {
		t.Fatal(err)
	}
	stager, err := backend.NewStager(0, cufile.StagerConfig{SlotSize: 256 << 10, Slots: 4, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}

	upstream := srv.Endpoint
	if via != nil {
		upstream = via(upstream)
	}
	f := NewFabric()
	server, err := NewServer(f, upstream, func(int) (cufile.Stager, error) { return stager, nil })
	if err != nil {
		t.Fatal(err)
	}
	endpoint, err := server.Listen()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{srv: srv, fabric: f, server: server, tokens: mint.NewTokenCache(f), alloc: alloc, bufPath: bufPath}
	r.store = newStore(t, srv, endpoint)
	r.direct = newStore(t, srv, srv.Endpoint)
	t.Cleanup(func() {
		server.Close()
		if err := r.tokens.Close(); err != nil {
			t.Error(err)
		}
		if n := f.Stats().Regions; n != 0 {
			t.Errorf("%d regions left registered", n)
		}
		if err := stager.Close(); err != nil {
			t.Error(err)
		}
		alloc.Close()
	})
	obj, err := r.store.Stat(context.Background(), bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	r.version = obj.Version
	return r
}

func newStore(t *testing.T, srv *testenv.Server, endpoint string) *objstore.Minio {
	t.Helper()
	m, err := objstore.NewMinio(objstore.Config{
		Endpoint:    endpoint,
		Region:      srv.Region,
		Credentials: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		MaxRetries:  1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// token mints a token for n bytes at dst of the buffer.
func (r *rig) token(t *testing.T, dst, n uint64) (string, *mint.Lease) {
	t.Helper()
	lease, err := r.tokens.Acquire(r.alloc, dst, n)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := lease.Token()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release() })
	return tok, lease
}

// buffer returns the buffer's bytes as the stand-in file holds them.
func (r *rig) buffer(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(r.bufPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *rig) get(t *testing.T, off, n int64, tok string) (objstore.RDMAReply, error) {
	t.Helper()
	// The test's context: a body handed back must stay readable.
	return r.store.GetRangeRDMA(t.Context(), bucket, key, off, n, r.version, tok)
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("%s: %d bytes differ from the %d expected (sha256)", what, len(got), len(want))
	}
}

func isZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

func TestServedWritesTheRangeIntoTheBuffer(t *testing.T) {
	r := newRig(t)
	const off, n, dst = 123457, 3<<20 + 5, 1<<20 + 3
	tok, _ := r.token(t, dst, n)
	rep, err := r.get(t, off, n, tok)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != objstore.RDMAServed || rep.Bytes != n || rep.Body != nil || rep.Status != 206 {
		t.Fatalf("reply %+v, want Served of %d bytes with no body, status 206", rep, n)
	}
	buf := r.buffer(t)
	sameBytes(t, "buffer", buf[dst:dst+n], testenv.RandomBytes(seed, off, n))
	if !isZero(buf[:dst]) || !isZero(buf[dst+n:]) {
		t.Fatal("bytes outside the token's range were written")
	}
	st := r.fabric.Stats()
	if st.Served != 1 || st.ServedBytes != n || st.Regions != 1 {
		t.Errorf("stats %+v", st)
	}
	if rdmaread.DeclineFor(rep, err) != abi.DeclineNone {
		t.Error("a served read declined")
	}
}

func TestServedReadsReuseOneRegistration(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	const parts, size = 8, 512 << 10
	for i := range parts {
		off := int64(i) * size
		tok, lease := r.token(t, uint64(off), size) // here: t.Fatal may not run in the goroutine
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lease.Release()
			rep, err := r.get(t, off, size, tok)
			if err != nil || rep.Outcome != objstore.RDMAServed {
				t.Errorf("part %d: %+v %v", i, rep, err)
			}
		}()
	}
	wg.Wait()
	sameBytes(t, "buffer", r.buffer(t)[:parts*size], testenv.RandomBytes(seed, 0, parts*size))
	if st := r.fabric.Stats(); st.Registrations != 1 || st.Served != parts {
		t.Errorf("%d registrations for %d reads of one buffer, %d served", st.Registrations, parts, st.Served)
	}
	if err := r.tokens.ReleaseAllocation(r.alloc); err != nil {
		t.Fatal(err)
	}
	if r.fabric.Stats().Regions != 0 {
		t.Fatal("ReleaseAllocation left the region registered")
	}
}

// throughProxy puts a fault proxy, without faults until told, between the
// fabric and versitygw.
func throughProxy(t *testing.T, cfg faultproxy.Config) (func(string) string, **faultproxy.Proxy) {
	var p *faultproxy.Proxy
	return func(endpoint string) string {
		var err error
		if p, err = faultproxy.Start(endpoint, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p.URL
	}, &p
}

func TestServedReadsKeepTheirUpstreamConnections(t *testing.T) {
	via, proxy := throughProxy(t, faultproxy.Config{})
	r := newRigVia(t, via)
	const n = 512 << 10
	before := (*proxy).Connections()
	get := func(i int64) {
		t.Helper()
		tok, _ := r.token(t, uint64(i*n), n)
		rep, err := r.get(t, i*n, n, tok)
		if err != nil || rep.Outcome != objstore.RDMAServed {
			t.Fatalf("read %d: %+v %v", i, rep, err)
		}
	}
	for i := range int64(6) {
		get(i)
	}
	sameBytes(t, "buffer", r.buffer(t)[:6*n], testenv.RandomBytes(seed, 0, 6*n))
	if got := (*proxy).Connections() - before; got != 1 {
		t.Fatalf("6 reads one after another opened %d connections upstream, want 1", got)
	}
	// A transfer cut short leaves the rest of its body unread: its
	// connection is closed, and the next read opens another.
	r.fabric.SetModeFor(ShortTransfer, 1)
	tok, _ := r.token(t, 6*n, n)
	if rep, err := r.get(t, 6*n, n, tok); err != nil || rep.Outcome != objstore.RDMAShortTransfer {
		t.Fatalf("%+v %v, want a short transfer", rep, err)
	}
	get(7)
	if got := (*proxy).Connections() - before; got != 2 {
		t.Fatalf("after a short transfer %d connections upstream, want 2", got)
	}
}

func TestUpstreamFaultsEndTheTransfer(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.Reset, faultproxy.StallBody} {
		t.Run(kind.String(), func(t *testing.T) {
			via, proxy := throughProxy(t, faultproxy.Config{Kinds: []faultproxy.Kind{kind}, StallFor: time.Minute})
			r := newRigVia(t, via)
			const off, n, dst = 4096, 2 << 20, 1 << 20
			(*proxy).SetRate(1)
			served := r.fabric.Stats().ServeNanos
			tok, _ := r.token(t, dst, n)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			rep, err := r.store.GetRangeRDMA(ctx, bucket, key, off, n, r.version, tok)
			if rep.Body != nil {
				rep.Body.Close()
			}
			if err == nil && rep.Outcome == objstore.RDMAServed {
				t.Fatalf("%+v: a transfer whose body broke was served", rep)
			}
			// The server's side ends too: a stalled body is given up with
			// its caller, not after the proxy's minute.
			deadline := time.Now().Add(10 * time.Second)
			for r.fabric.Stats().ServeNanos == served {
				if time.Now().After(deadline) {
					t.Fatal("the transfer still runs after its caller gave up")
				}
				time.Sleep(10 * time.Millisecond)
			}
			buf := r.buffer(t)
			if !isZero(buf[:dst]) || !isZero(buf[dst+n:]) {
				t.Fatal("bytes outside the token's range were written")
			}
			// The fabric serves the next transfer whole.
			(*proxy).SetRate(0)
			rep, err = r.get(t, off, n, tok)
			if err != nil || rep.Outcome != objstore.RDMAServed {
				t.Fatalf("after the fault: %+v %v", rep, err)
			}
			sameBytes(t, "buffer", r.buffer(t)[dst:dst+n], testenv.RandomBytes(seed, off, n))
			if got := (*proxy).Counts()[kind.String()]; got != 1 {
				t.Fatalf("%d %s faults injected, want 1", got, kind)
			}
		})
	}
}

func TestModes(t *testing.T) {
	r := newRig(t)
	const off, n = 1000, 1 << 20
	want := testenv.RandomBytes(seed, off, n)

	t.Run("decline_501", func(t *testing.T) {
		r.fabric.SetMode(Decline501)
		defer r.fabric.SetMode(Normal)
		tok, _ := r.token(t, 0, n)
		rep, err := r.get(t, off, n, tok)
		if err != nil || rep.Outcome != objstore.RDMADeclined501 || rep.Body != nil || rep.Status != 501 {
			t.Fatalf("%+v %v, want Declined501 without a body", rep, err)
		}
		if rdmaread.DeclineFor(rep, err) != abi.DeclineServer501 || !isZero(r.buffer(t)) {
			t.Fatal("declined, yet the buffer was written or the decline misnamed")
		}
	})
	t.Run("ignore_token", func(t *testing.T) {
		r.fabric.SetMode(IgnoreToken)
		defer r.fabric.SetMode(Normal)
		tok, _ := r.token(t, 0, n)
		rep, err := r.get(t, off, n, tok)
		if err != nil || rep.Outcome != objstore.RDMATokenIgnored || rep.Body == nil {
			t.Fatalf("%+v %v, want TokenIgnored with a body", rep, err)
		}
		body, err := io.ReadAll(rep.Body)
		rep.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, "body", body, want)
		if rdmaread.DeclineFor(rep, nil) != abi.DeclineTokenIgnored || !isZero(r.buffer(t)) {
			t.Fatal("ignored, yet the buffer was written or the decline misnamed")
		}
	})
	t.Run("fail_registration", func(t *testing.T) {
		r.fabric.SetModeFor(FailRegistration, 1)
		a := &sizedAlloc{Allocation: r.alloc}
		_, err := r.tokens.Acquire(a, 0, n)
		if !errors.Is(err, mint.ErrRegistrationFailed) || rdmaread.DeclineFor(objstore.RDMAReply{}, err) != abi.DeclineRegistrationFailed {
			t.Fatalf("%v, want ErrRegistrationFailed", err)
		}
		// Used up: the next registration works.
		lease, err := r.tokens.Acquire(a, 0, n)
		if err != nil {
			t.Fatal(err)
		}
		lease.Release()
		r.tokens.ReleaseAllocation(a)
	})
	t.Run("short_transfer", func(t *testing.T) {
		r.fabric.SetMode(ShortTransfer)
		defer r.fabric.SetMode(Normal)
		const dst = 2 << 20
		tok, _ := r.token(t, dst, n)
		rep, err := r.get(t, off, n, tok)
		if err != nil || rep.Outcome != objstore.RDMAShortTransfer || rep.Bytes != n/2 {
			t.Fatalf("%+v %v, want ShortTransfer of %d", rep, err, n/2)
		}
		buf := r.buffer(t)
		sameBytes(t, "written half", buf[dst:dst+n/2], want[:n/2])
		if !isZero(buf[dst+n/2 : dst+n]) {
			t.Fatal("bytes past the reported count were written")
		}
		if rdmaread.DeclineFor(rep, nil) != abi.DeclineShortTransfer {
			t.Fatal("decline misnamed")
		}
		clear(buf)
		os.WriteFile(r.bufPath, buf, 0o600)
	})
	t.Run("reject_token", func(t *testing.T) {
		r.fabric.SetMode(RejectToken)
		defer r.fabric.SetMode(Normal)
		tok, _ := r.token(t, 0, n)
		_, err := r.get(t, off, n, tok)
		if !errors.Is(err, objstore.ErrTokenRejected) || rdmaread.DeclineFor(objstore.RDMAReply{}, err) != abi.DeclineTokenRejected {
			t.Fatalf("%v, want ErrTokenRejected", err)
		}
	})
	t.Run("stall", func(t *testing.T) {
		r.fabric.SetMode(Stall)
		r.fabric.SetStall(time.Minute)
		defer r.fabric.SetMode(Normal)
		tok, _ := r.token(t, 0, n)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := r.store.GetRangeRDMA(ctx, bucket, key, off, n, r.version, tok)
		if !errors.Is(err, context.DeadlineExceeded) || rdmaread.DeclineFor(objstore.RDMAReply{}, err) != abi.DeclineTimeout {
			t.Fatalf("%v, want a timeout", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the timeout did not end the request")
		}
	})
	t.Run("stall then serve", func(t *testing.T) {
		r.fabric.SetModeFor(Stall, 1)
		r.fabric.SetStall(100 * time.Millisecond)
		tok, _ := r.token(t, 0, n)
		rep, err := r.get(t, off, n, tok)
		if err != nil || rep.Outcome != objstore.RDMAServed {
			t.Fatalf("%+v %v, want Served after the stall", rep, err)
		}
		sameBytes(t, "buffer", r.buffer(t)[:n], want)
	})
	t.Run("bounded mode", func(t *testing.T) {
		r.fabric.SetModeFor(Decline501, 1)
		tok, _ := r.token(t, 0, n)
		first, err1 := r.get(t, off, n, tok)
		second, err2 := r.get(t, off, n, tok)
		if err1 != nil || err2 != nil || first.Outcome != objstore.RDMADeclined501 || second.Outcome != objstore.RDMAServed {
			t.Fatalf("%v %v / %v %v, want one decline then served", first.Outcome, err1, second.Outcome, err2)
		}
	})
	st := r.fabric.Stats()
	if st.Declined != 2 || st.Ignored != 1 || st.Rejected != 1 || st.Short != 1 || st.Stalled != 2 || st.FailedRegistrations != 1 {
		t.Errorf("stats %+v", st)
	}
}

// sizedAlloc is r.alloc under another identity, so the cache registers it
// afresh.
type sizedAlloc struct{ cufile.Allocation }

func TestTokensTheFabricDoesNotKnowAreRejected(t *testing.T) {
	r := newRig(t)
	const n = 4096
	tok, lease := r.token(t, 0, 1<<20)
	good, _ := rdmatoken.Parse(tok)
	for name, bad := range map[string]rdmatoken.Token{
		"unknown rkey":        func() rdmatoken.Token { b := good; b.RKey++; return b }(),
		"another fabric":      func() rdmatoken.Token { b := good; b.DCT ^= 1; return b }(),
		"before the region":   func() rdmatoken.Token { b := good; b.Addr--; return b }(),
		"past the region end": func() rdmatoken.Token { b := good; b.Addr += 8 << 20; return b }(),
		"larger than region":  func() rdmatoken.Token { b := good; b.Size = bufSize + 1; return b }(),
	} {
		if _, err := r.get(t, 0, n, bad.String()); !errors.Is(err, objstore.ErrTokenRejected) {
			t.Errorf("%s: %v, want ErrTokenRejected", name, err)
		}
	}
	// A token smaller than the range is refused before it is sent.
	small := good
	small.Size = n - 1
	if _, err := r.get(t, 0, n, small.String()); !errors.Is(err, objstore.ErrTokenRejected) {
		t.Errorf("small token: %v", err)
	}
	// A released region's tokens are refused.
	lease.Release()
	if err := r.tokens.ReleaseAllocation(r.alloc); err != nil {
		t.Fatal(err)
	}
	if _, err := r.get(t, 0, n, tok); !errors.Is(err, objstore.ErrTokenRejected) {
		t.Errorf("released region: %v", err)
	}
	if !isZero(r.buffer(t)) {
		t.Fatal("a refused token wrote into the buffer")
	}
}

func TestGETWithoutTokenPassesThroughByteExact(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	body, err := r.store.GetRange(ctx, bucket, key, 0, objSize, r.version)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "whole object", got, testenv.RandomBytes(seed, 0, objSize))
	// Errors pass through too.
	if _, err := r.store.Stat(ctx, bucket, "absent"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("stat of an absent key: %v", err)
	}
	stale := r.version
	stale.ETag = "00000000000000000000000000000000"
	tok, _ := r.token(t, 0, 10)
	if _, err := r.get(t, 0, 10, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.GetRangeRDMA(ctx, bucket, key, 0, 10, stale, tok); !errors.Is(err, objstore.ErrChanged) {
		t.Errorf("stale version with a token: %v, want ErrChanged", err)
	}
	if st := r.fabric.Stats(); st.Passthrough < 2 {
		t.Errorf("stats %+v", st)
	}
}

// versitygw v1.8.0's posix backend has no RDMA: a token it is sent straight
// (no fabric) is ignored and the range comes back in the body with 206.
func TestVersityGWIgnoresAFabricToken(t *testing.T) {
	r := newRig(t)
	const off, n = 77, 2 << 20
	tok, _ := r.token(t, 0, n)
	rep, err := r.direct.GetRangeRDMA(context.Background(), bucket, key, off, n, r.version, tok)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != objstore.RDMATokenIgnored || rep.Body == nil || rep.Status != 206 {
		t.Fatalf("%+v, want TokenIgnored with a body and 206", rep)
	}
	body, err := io.ReadAll(rep.Body)
	rep.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "body", body, testenv.RandomBytes(seed, off, n))
	if !isZero(r.buffer(t)) {
		t.Fatal("the buffer was written without the fabric")
	}
}

func TestFabricIsAMinter(t *testing.T) {
	var m mint.Minter = NewFabric()
	if m.Name() != "loopback" || m.Fabric() != "loopback" {
		t.Fatalf("Name %q Fabric %q", m.Name(), m.Fabric())
	}
	f := m.(*Fabric)
	if _, err := f.Register(&bigAlloc{size: 8 << 30}, 0, rdmatoken.MaxRegistration+1); !errors.Is(err, mint.ErrTooLarge) {
		t.Errorf("over MaxRegistration: %v", err)
	}
	reg, err := f.Register(&bigAlloc{size: 8 << 30}, 1<<30, 2<<30)
	if err != nil {
		t.Fatal(err)
	}
	s, err := reg.Token(4096, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := rdmatoken.Parse(s)
	if err != nil || len(s) != rdmatoken.Len {
		t.Fatalf("token %q: %v", s, err)
	}
	if tok.Addr < baseAddress || tok.Size != 1<<20 || !tok.HasGID || tok.GID != loopbackGID {
		t.Errorf("token %+v", tok)
	}
	if _, err := reg.Token(2<<30-1, 2); !errors.Is(err, mint.ErrOutOfBounds) {
		t.Errorf("token past the region: %v", err)
	}
	reg.Release()
	if _, err := reg.Token(0, 1); !errors.Is(err, mint.ErrRegistrationFailed) {
		t.Errorf("token of a released region: %v", err)
	}
	if st := f.Stats(); st.Regions != 0 || st.Registrations != 1 || st.Deregistrations != 1 {
		t.Errorf("stats %+v", st)
	}
}

type bigAlloc struct{ size uint64 }

func (a *bigAlloc) Device() int  { return 0 }
func (a *bigAlloc) Size() uint64 { return a.size }
func (a *bigAlloc) Close() error { return nil }

// fillBuffer puts data at off of the stand-in buffer.
func (r *rig) fillBuffer(t *testing.T, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(r.bufPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

// An UploadPart with a token and no body: the fabric reads the token's
// bytes out of the buffer and stores them upstream, and the completed
// object holds them byte for byte.
func TestRDMAUploadPartReadsTheBufferIntoThePart(t *testing.T) {
	r := newRig(t)
	const n, src = 3<<20 + 5, 1<<20 + 3
	data := testenv.RandomBytes(99, 0, n)
	r.fillBuffer(t, src, data)
	ctx := context.Background()
	id, err := r.direct.CreateMultipart(ctx, bucket, "put.bin")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := r.token(t, src, n)
	rep, err := r.store.UploadPartRDMA(ctx, objstore.PartTarget{Bucket: bucket, Key: "put.bin", UploadID: id, Number: 1, Size: n}, tok)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != objstore.RDMAServed || rep.Bytes != n || rep.ETag == "" {
		t.Fatalf("reply %+v, want served with %d bytes and an ETag", rep, n)
	}
	if _, err := r.direct.CompleteMultipart(ctx, bucket, "put.bin", id, []objstore.CompletedPart{{Number: 1, ETag: rep.ETag}}); err != nil {
		t.Fatal(err)
	}
	obj, err := r.direct.Stat(ctx, bucket, "put.bin")
	if err != nil || obj.Size != n {
		t.Fatalf("stat %+v %v, want %d bytes", obj, err, n)
	}
	body, err := r.direct.GetRange(ctx, bucket, "put.bin", 0, n, obj.Version)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "object", got, data)
	if st := r.fabric.Stats(); st.PutsServed != 1 || st.ServedBytes != n {
		t.Errorf("stats %+v", st)
	}
}

// Each failure mode answers a PUT as a server or NIC that fails so would:
// never as served.
func TestRDMAUploadPartModes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const n = 1 << 20
	cases := []struct {
		mode    Mode
		outcome objstore.RDMAOutcome
		err     error
		decline abi.Decline
	}{
		{Decline501, objstore.RDMADeclined501, nil, abi.DeclineServer501},
		{IgnoreToken, objstore.RDMATokenIgnored, nil, abi.DeclineTokenIgnored},
		{ShortTransfer, objstore.RDMAShortTransfer, nil, abi.DeclineShortTransfer},
		{RejectToken, 0, objstore.ErrTokenRejected, abi.DeclineTokenRejected},
	}
	for _, c := range cases {
		t.Run(c.mode.String(), func(t *testing.T) {
			id, err := r.direct.CreateMultipart(ctx, bucket, "modes.bin")
			if err != nil {
				t.Fatal(err)
			}
			defer r.direct.AbortMultipart(ctx, bucket, "modes.bin", id)
			tok, _ := r.token(t, 0, n)
			r.fabric.SetModeFor(c.mode, 1)
			rep, err := r.store.UploadPartRDMA(ctx, objstore.PartTarget{Bucket: bucket, Key: "modes.bin", UploadID: id, Number: 1, Size: n}, tok)
			if c.err != nil && !errors.Is(err, c.err) || c.err == nil && (err != nil || rep.Outcome != c.outcome) {
				t.Fatalf("reply %+v, %v; want %v %v", rep, err, c.outcome, c.err)
			}
			if c.mode == ShortTransfer && rep.Bytes != n/2 {
				t.Errorf("short transfer of %d bytes, want %d", rep.Bytes, n/2)
			}
			if d := rdmaread.DeclineFor(objstore.RDMAReply{Outcome: rep.Outcome, Bytes: rep.Bytes}, err); d != c.decline {
				t.Errorf("decline %s, want %s", d, c.decline)
			}
		})
	}
}
