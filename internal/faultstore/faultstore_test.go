package faultstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// oneObject is a Store holding one object, "b/k".
type oneObject struct{ data []byte }

func (o oneObject) ListBuckets(context.Context) ([]string, error) { return []string{"b"}, nil }
func (o oneObject) CheckBucket(context.Context, string) error     { return nil }
func (o oneObject) Stat(_ context.Context, _, key string) (objstore.Object, error) {
	return objstore.Object{Key: key, Version: objstore.Version{ETag: "e", Size: int64(len(o.data))}}, nil
}
func (o oneObject) List(context.Context, string, string, string, int) (objstore.Page, error) {
	return objstore.Page{Objects: []objstore.Object{{Key: "k"}}}, nil
}
func (o oneObject) GetRange(_ context.Context, _, _ string, off, n int64, _ objstore.Version) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(o.data[off : off+n])), nil
}

func testData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// readBody reads a body the way the read paths do: a StallGuard and
// ReadFull of exactly n bytes, then a check that the body ends there.
func readBody(t *testing.T, f *Faulty, off, n int64, timeout time.Duration) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := objstore.StallGuard{Timeout: timeout}
	g.Start(cancel)
	defer g.Stop()
	body, err := f.GetRange(ctx, "b", "k", off, n, objstore.Version{})
	if err != nil {
		return nil, g.Err(err)
	}
	defer body.Close()
	p := make([]byte, n)
	if err := g.ReadFull(ctx, body, p); err != nil {
		return nil, err
	}
	if err := objstore.CheckEnd(body); err != nil {
		return nil, err
	}
	return p, nil
}

func TestFaultyScriptInjectsEachKindAndReadersCatchIt(t *testing.T) {
	data := testData(64 << 10)
	script := append([]FaultKind{FaultNone}, AllFaults()...)
	f := NewFaulty(oneObject{data}, FaultConfig{Script: script, Seed: 1})
	const off, n = 1000, 50000
	// The stall guard ends a stall after timeout; a read that is not
	// stalled would have to pause that long on a busy machine to be
	// taken for one.
	const timeout = 500 * time.Millisecond
	for _, k := range script {
		start := time.Now()
		got, err := readBody(t, f, off, n, timeout)
		took := time.Since(start)
		if k == FaultNone {
			if err != nil || !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("%v: %v, or bytes differ", k, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%v: the read succeeded; the fault went unnoticed", k)
		}
		if !objstore.IsRetryable(err) {
			t.Errorf("%v: %v is not retryable", k, err)
		}
		switch k {
		case FaultStallResponse, FaultStallBody:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: %v, want a timeout", k, err)
			}
			if took > 10*timeout { // a stall left to itself lasts for ever
				t.Errorf("%v: the stall was noticed after %v", k, took)
			}
		case FaultEarlyEOF, FaultShort:
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%v: %v, want io.ErrUnexpectedEOF", k, err)
			}
		case FaultLong:
			if !errors.Is(err, objstore.ErrLongBody) {
				t.Errorf("%v: %v, want objstore.ErrLongBody", k, err)
			}
		case FaultError:
			var te *TransientError
			if !errors.As(err, &te) || (te.Code != "SlowDown" && te.Code != "InternalError") {
				t.Errorf("%v: %v, want a transient server error", k, err)
			}
		}
	}
	c := f.Counts()
	if c["calls"] != int64(len(script)) {
		t.Errorf("calls = %d, want %d", c["calls"], len(script))
	}
	for _, k := range AllFaults() {
		if c[k.String()] != 1 {
			t.Errorf("count of %v = %d, want 1 (%s)", k, c[k.String()], SortedFaultCounts(c))
		}
	}
	if f.Injected() != int64(len(AllFaults())) {
		t.Errorf("Injected() = %d", f.Injected())
	}
}

func TestFaultyBodiesOnTheMinioPathNeverPassExtraBytes(t *testing.T) {
	// Every reader reads through a Getter's body: a short body becomes
	// io.ErrUnexpectedEOF and a long one fails its last read, so none of
	// its bytes is trusted.
	data := testData(10000)
	for _, k := range []FaultKind{FaultShort, FaultLong, FaultEarlyEOF} {
		f := NewFaulty(oneObject{data}, FaultConfig{Script: []FaultKind{k}})
		g := &objstore.Getter{Store: f, ReadTimeout: time.Minute}
		body, err := g.Open(context.Background(), objstore.Range{Bucket: "b", Key: "k", Off: 100, N: 5000}, false)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 5000)
		err = body.ReadFull(got)
		body.Close()
		switch k {
		case FaultLong:
			if !errors.Is(err, objstore.ErrLongBody) {
				t.Errorf("%v through a Getter: %v; want objstore.ErrLongBody", k, err)
			}
		default:
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%v through a Getter: %v; want io.ErrUnexpectedEOF", k, err)
			}
		}
	}
}

func TestFaultyBodiesLieAboutTheirLength(t *testing.T) {
	data := testData(10000)
	read := func(k FaultKind) ([]byte, error) {
		f := NewFaulty(oneObject{data}, FaultConfig{Script: []FaultKind{k}})
		body, err := f.GetRange(context.Background(), "b", "k", 0, 4000, objstore.Version{})
		if err != nil {
			return nil, err
		}
		defer body.Close()
		return io.ReadAll(body)
	}
	got, err := read(FaultShort)
	if err != nil || len(got) >= 4000 || !bytes.Equal(got, data[:len(got)]) {
		t.Errorf("short: %d bytes, %v; want fewer than 4000 correct bytes and a clean EOF", len(got), err)
	}
	got, err = read(FaultLong)
	if err != nil || len(got) <= 4000 || !bytes.Equal(got[:4000], data[:4000]) {
		t.Errorf("long: %d bytes, %v; want the 4000 bytes and more after them", len(got), err)
	}
	got, err = read(FaultEarlyEOF)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) >= 4000 {
		t.Errorf("early EOF: %d bytes, %v", len(got), err)
	}
}

func TestFaultyRandomScheduleIsSeededAndHonoursRate(t *testing.T) {
	data := testData(4096)
	run := func(seed uint64, rate float64) []FaultKind {
		f := NewFaulty(oneObject{data}, FaultConfig{Seed: seed, Rate: rate, Kinds: []FaultKind{FaultError, FaultEarlyEOF, FaultShort, FaultLong}})
		var kinds []FaultKind
		for range 2000 {
			k, _ := f.draw(true)
			kinds = append(kinds, k)
		}
		return kinds
	}
	a, b, c := run(42, 0.3), run(42, 0.3), run(43, 0.3)
	same := func(x, y []FaultKind) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if same(a, c) {
		t.Fatal("two seeds gave one schedule")
	}
	faults := 0
	seen := map[FaultKind]bool{}
	for _, k := range a {
		if k != FaultNone {
			faults++
			seen[k] = true
		}
	}
	if faults < 500 || faults > 700 {
		t.Errorf("%d faults in 2000 at rate 0.3", faults)
	}
	if len(seen) != 4 {
		t.Errorf("kinds drawn: %v, want all four configured", seen)
	}
	for _, k := range run(1, 0) {
		if k != FaultNone {
			t.Fatal("a fault at rate 0")
		}
	}
}

func TestFaultyMetadataFaultsAreTransientOrStall(t *testing.T) {
	f := NewFaulty(oneObject{testData(10)}, FaultConfig{Seed: 3, Rate: 1, Metadata: true})
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, err := f.Stat(ctx, "b", "k")
		cancel()
		var te *TransientError
		if !errors.As(err, &te) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stat under faults: %v", err)
		}
		if !objstore.IsRetryable(err) {
			t.Fatalf("%v not retryable", err)
		}
	}
	c := f.Counts()
	if c["error"] == 0 || c["stall_response"] == 0 || c["early_eof"] != 0 {
		t.Fatalf("metadata faults: %s", SortedFaultCounts(c))
	}
	// Off by default.
	g := NewFaulty(oneObject{testData(10)}, FaultConfig{Rate: 1})
	if _, err := g.Stat(context.Background(), "b", "k"); err != nil {
		t.Fatalf("stat with Metadata off: %v", err)
	}
	g.SetRate(0)
	if _, err := io.ReadAll(must(g.GetRange(context.Background(), "b", "k", 0, 10, objstore.Version{}))); err != nil {
		t.Fatalf("get at rate 0: %v", err)
	}
}

func must(r io.ReadCloser, err error) io.Reader {
	if err != nil {
		return iotestErrReader{err}
	}
	return r
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// rawOneObject is oneObject whose GETs can also be handed over as their
// sockets (a local connection that carries the range's bytes and stays
// open after them, as a keep-alive server's does) and sent over RDMA (a
// token the store ignores, the range in the body; or, with served, the
// range written over RDMA, no body).
type rawOneObject struct {
	oneObject
	t      *testing.T
	served bool
}

func (o rawOneObject) GetRaw(_ context.Context, _, _ string, off, n int64, _ objstore.Version) (*objstore.RawBody, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	o.t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		// The listener closes once the connection is accepted: closed
		// before that, it would reset the connection waiting in its queue.
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(o.data[off : off+n])
		<-done
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	o.t.Cleanup(func() { c.Close() })
	return objstore.NewRawBody(c.(*net.TCPConn), nil, n, 200*time.Millisecond)
}

func (o rawOneObject) GetRangeRDMA(_ context.Context, _, _ string, off, n int64, _ objstore.Version, _ string) (objstore.RDMAReply, error) {
	if o.served {
		return objstore.RDMAReply{Outcome: objstore.RDMAServed, Bytes: n, Status: 206}, nil
	}
	return objstore.RDMAReply{Outcome: objstore.RDMATokenIgnored, Body: io.NopCloser(bytes.NewReader(o.data[off : off+n])), Status: 206}, nil
}

// A Faulty store hands GETs over as their sockets where its inner store
// can (a decorated store still splices), and breaks them as it breaks
// ranged GETs: before the reply, in the body where it would have ended
// (the bytes before the fault right), stalled past the body's timeout, or
// longer than asked (refused). Each fault counted once; without an inner
// store that can, nothing is sent.
func TestFaultyRawGETsCarryItsFaults(t *testing.T) {
	data := testData(256 << 10)
	script := append([]FaultKind{FaultNone}, AllFaults()...)
	f := NewFaulty(rawOneObject{oneObject: oneObject{data}, t: t}, FaultConfig{Script: script, Seed: 1})
	var _ objstore.RawGetter = f
	const off, n = 1000, 200 << 10
	for _, k := range script {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		b, err := f.GetRaw(ctx, "b", "k", off, n, objstore.Version{})
		var got []byte
		if err == nil {
			got, err = drainRaw(t, b)
			b.Close()
		}
		took := time.Since(start)
		cancel()
		if k == FaultNone {
			if err != nil || !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("%v: %v, or bytes differ", k, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%v: the GET succeeded; the fault went unnoticed", k)
		}
		if !objstore.IsRetryable(err) {
			t.Errorf("%v: %v is not retryable", k, err)
		}
		if !bytes.Equal(got, data[off:off+len(got)]) {
			t.Errorf("%v: the %d bytes before the fault differ from the object's", k, len(got))
		}
		switch k {
		case FaultStallResponse:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: %v, want the context's timeout", k, err)
			}
		case FaultStallBody:
			if !errors.Is(err, os.ErrDeadlineExceeded) || took < 150*time.Millisecond {
				t.Errorf("%v: %v after %v, want the body's timeout (200ms)", k, err, took)
			}
		case FaultEarlyEOF, FaultShort:
			if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) >= n {
				t.Errorf("%v: %d bytes, %v; want fewer than %d and io.ErrUnexpectedEOF", k, len(got), err, n)
			}
		case FaultLong:
			if !errors.Is(err, objstore.ErrLongBody) {
				t.Errorf("%v: %v, want objstore.ErrLongBody", k, err)
			}
		case FaultError:
			var te *TransientError
			if !errors.As(err, &te) {
				t.Errorf("%v: %v, want a transient server error", k, err)
			}
		}
		if took > 5*time.Second {
			t.Errorf("%v: noticed after %v", k, took)
		}
	}
	c := f.Counts()
	for _, k := range AllFaults() {
		if c[k.String()] != 1 {
			t.Errorf("count of %v = %d, want 1 (%s)", k, c[k.String()], SortedFaultCounts(c))
		}
	}
	g := NewFaulty(oneObject{data}, FaultConfig{Rate: 1})
	if _, err := g.GetRaw(context.Background(), "b", "k", 0, 10, objstore.Version{}); !errors.Is(err, objstore.ErrNoRaw) {
		t.Errorf("inner store without raw GETs: %v, want objstore.ErrNoRaw", err)
	}
	if c := g.Counts(); c["calls"] != 0 {
		t.Errorf("a raw GET the inner store cannot send was counted: %s", SortedFaultCounts(c))
	}
}

// A Faulty store sends GETs over RDMA where its inner store can, with the
// faults that strike before a reply, and a body fault on a reply that
// carries the bytes; a reply served over RDMA has no body, passes
// unchanged and counts no fault. Without an inner store that can, nothing
// is sent.
func TestFaultyRDMAGETsCarryItsFaults(t *testing.T) {
	data := testData(64 << 10)
	const off, n = 100, 30000
	read := func(f *Faulty) (objstore.RDMAReply, []byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		rep, err := f.GetRangeRDMA(ctx, "b", "k", off, n, objstore.Version{}, "token")
		if err != nil || rep.Body == nil {
			return rep, nil, err
		}
		defer rep.Body.Close()
		p := make([]byte, n)
		_, err = io.ReadFull(rep.Body, p)
		if err == nil {
			err = objstore.CheckEnd(rep.Body)
		}
		return rep, p, err
	}
	store := rawOneObject{oneObject: oneObject{data}, t: t}
	f := NewFaulty(store, FaultConfig{Script: []FaultKind{FaultNone, FaultError, FaultStallResponse, FaultEarlyEOF, FaultLong}})
	var _ objstore.RDMAGetter = f
	if rep, got, err := read(f); err != nil || rep.Outcome != objstore.RDMATokenIgnored || !bytes.Equal(got, data[off:off+n]) {
		t.Fatalf("no fault: %+v, %v, or bytes differ", rep, err)
	}
	var te *TransientError
	if _, _, err := read(f); !errors.As(err, &te) {
		t.Errorf("error: %v, want a transient server error", err)
	}
	if _, _, err := read(f); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stalled reply: %v, want the context's timeout", err)
	}
	if _, _, err := read(f); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("early end of the body: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, _, err := read(f); !errors.Is(err, objstore.ErrLongBody) {
		t.Errorf("long body: %v, want objstore.ErrLongBody", err)
	}
	if f.Injected() != 4 {
		t.Errorf("faults injected: %s, want 4", SortedFaultCounts(f.Counts()))
	}
	store.served = true
	s := NewFaulty(store, FaultConfig{Script: []FaultKind{FaultEarlyEOF}})
	if rep, _, err := read(s); err != nil || rep.Outcome != objstore.RDMAServed || rep.Bytes != n {
		t.Errorf("served reply with a body fault drawn: %+v, %v; want it served as is", rep, err)
	}
	if s.Injected() != 0 {
		t.Errorf("a body fault without a body was counted: %s", SortedFaultCounts(s.Counts()))
	}
	g := NewFaulty(oneObject{data}, FaultConfig{Rate: 1})
	if _, err := g.GetRangeRDMA(context.Background(), "b", "k", 0, 10, objstore.Version{}, "token"); !errors.Is(err, objstore.ErrNoRDMAGetter) {
		t.Errorf("inner store without RDMA: %v, want objstore.ErrNoRDMAGetter", err)
	}
}

// drainRaw reads the whole body in pieces and returns what came out,
// up to the first error.
func drainRaw(t *testing.T, b *objstore.RawBody) ([]byte, error) {
	t.Helper()
	var out []byte
	for b.Left() > 0 {
		piece := make([]byte, min(b.Left(), 100_000))
		if err := b.ReadFull(piece); err != nil {
			return out, err
		}
		out = append(out, piece...)
	}
	return out, nil
}
