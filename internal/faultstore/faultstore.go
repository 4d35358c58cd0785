// Package faultstore is a Store decorator for tests that injects failures
// from outside the store: errors and stalls before a reply, bodies that
// break, stall, end short or run long. A raw GET's body it breaks by
// handing the reader a loopback connection of its own that carries the
// body's bytes up to the fault, so the product's socket reads have no hook.
package faultstore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"sync"

	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// FaultKind is one way a request to the object store can go wrong.
type FaultKind int

const (
	// FaultNone passes the request through unchanged.
	FaultNone FaultKind = iota
	// FaultError fails the request before any response: a transient server
	// error (500 InternalError or 503 SlowDown) that IsRetryable accepts.
	FaultError
	// FaultStallResponse blocks the request until its context ends, as a
	// server that accepted the connection and never answered.
	FaultStallResponse
	// FaultEarlyEOF returns a body that ends before n bytes with
	// io.ErrUnexpectedEOF: the connection broke mid-body.
	FaultEarlyEOF
	// FaultStallBody returns a body that sends some bytes and then blocks
	// until the request's context ends.
	FaultStallBody
	// FaultShort returns a body that lies: fewer than n bytes followed by a
	// clean io.EOF, as if the range had ended.
	FaultShort
	// FaultLong returns a body that lies the other way: the n bytes asked
	// for followed by extra bytes.
	FaultLong

	numFaultKinds
)

var faultNames = [...]string{
	FaultNone:          "none",
	FaultError:         "error",
	FaultStallResponse: "stall_response",
	FaultEarlyEOF:      "early_eof",
	FaultStallBody:     "stall_body",
	FaultShort:         "short",
	FaultLong:          "long",
}

func (k FaultKind) String() string {
	if k >= 0 && k < numFaultKinds {
		return faultNames[k]
	}
	return fmt.Sprintf("fault(%d)", int(k))
}

// AllFaults lists every kind that changes a request.
func AllFaults() []FaultKind {
	return []FaultKind{FaultError, FaultStallResponse, FaultEarlyEOF, FaultStallBody, FaultShort, FaultLong}
}

// TransientError is what FaultError injects: a server-side failure that a
// retry may cure. Its text follows the server's XML error code.
type TransientError struct {
	Status int    // 500 or 503
	Code   string // InternalError or SlowDown
}

func (e *TransientError) Error() string {
	return fmt.Sprintf("injected fault: %d %s", e.Status, e.Code)
}

// FaultConfig says which requests Faulty breaks and how.
type FaultConfig struct {
	// Seed makes the random schedule reproducible.
	Seed uint64
	// Rate is the probability that a request gets a fault (0 = never).
	Rate float64
	// Kinds are the faults drawn from, uniformly; nil means AllFaults. Kinds
	// that need a body apply to the GETs (GetRange, GetRaw, and
	// GetRangeRDMA when its reply carries the body); other operations draw
	// from FaultError and FaultStallResponse among these.
	Kinds []FaultKind
	// Script fixes the fault of the first len(Script) GETs, in order; the
	// random schedule takes over after it.
	Script []FaultKind
	// Metadata extends faults to ListBuckets, CheckBucket, Stat and List
	// (off: only GetRange is affected).
	Metadata bool
}

// Faulty is a Store decorator that injects failures, by a seeded random
// schedule or an explicit script, and counts what it injected by kind. It
// is a RawGetter and an RDMAGetter, passing those GETs to Inner (when it is
// one) with the same faults, so that a wrapped store still splices and
// still sends GETs over RDMA, and its faults reach those paths too. It is
// safe for concurrent use.
type Faulty struct {
	Inner objstore.Store

	mu     sync.Mutex
	cfg    FaultConfig
	rng    *rand.Rand
	script int
	counts [numFaultKinds]int64
	calls  int64
	raws   int64 // GetRaw calls among them
}

// NewFaulty wraps inner.
func NewFaulty(inner objstore.Store, cfg FaultConfig) *Faulty {
	if cfg.Kinds == nil {
		cfg.Kinds = AllFaults()
	}
	return &Faulty{Inner: inner, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))}
}

// SetRate changes the probability of a fault from now on; tests set up with
// faults off and turn them on for the part under test.
func (f *Faulty) SetRate(rate float64) {
	f.mu.Lock()
	f.cfg.Rate = rate
	f.mu.Unlock()
}

// Counts returns how many faults of each kind were injected, by name, and
// "calls": every request seen, and "raw_calls": the GetRaw calls among them.
func (f *Faulty) Counts() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{"calls": f.calls, "raw_calls": f.raws}
	for k := FaultKind(1); k < numFaultKinds; k++ {
		out[k.String()] = f.counts[k]
	}
	return out
}

// Injected is the number of faults injected, all kinds together.
func (f *Faulty) Injected() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for k := FaultKind(1); k < numFaultKinds; k++ {
		n += f.counts[k]
	}
	return n
}

// draw picks the next fault and counts it; withBody says whether body
// faults may be used. It also returns a random fraction for where in the
// body the fault strikes.
func (f *Faulty) draw(withBody bool) (FaultKind, float64) {
	k, frac := f.pick(withBody)
	f.count(k)
	return k, frac
}

// count counts a fault as injected.
func (f *Faulty) count(k FaultKind) {
	if k > FaultNone && k < numFaultKinds {
		f.mu.Lock()
		f.counts[k]++
		f.mu.Unlock()
	}
}

// pick is draw without the count, for a fault that may find nothing to
// strike (a reply without a body).
func (f *Faulty) pick(withBody bool) (FaultKind, float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	k := FaultNone
	switch {
	case withBody && f.script < len(f.cfg.Script):
		k = f.cfg.Script[f.script]
		f.script++
	case f.cfg.Rate > 0 && f.rng.Float64() < f.cfg.Rate:
		kinds := f.cfg.Kinds
		if !withBody {
			kinds = nil
			for _, c := range f.cfg.Kinds {
				if c == FaultError || c == FaultStallResponse {
					kinds = append(kinds, c)
				}
			}
		}
		if len(kinds) > 0 {
			k = kinds[f.rng.IntN(len(kinds))]
		}
	}
	return k, f.rng.Float64()
}

// before applies faults that strike before a response.
func (f *Faulty) before(ctx context.Context, k FaultKind, frac float64) error {
	switch k {
	case FaultError:
		if frac < 0.5 {
			return &TransientError{Status: 500, Code: "InternalError"}
		}
		return &TransientError{Status: 503, Code: "SlowDown"}
	case FaultStallResponse:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *Faulty) meta(ctx context.Context) error {
	if !f.cfg.Metadata {
		return nil
	}
	k, frac := f.draw(false)
	return f.before(ctx, k, frac)
}

// ListBuckets implements Store.
func (f *Faulty) ListBuckets(ctx context.Context) ([]string, error) {
	if err := f.meta(ctx); err != nil {
		return nil, err
	}
	return f.Inner.ListBuckets(ctx)
}

// CheckBucket implements Store.
func (f *Faulty) CheckBucket(ctx context.Context, bucket string) error {
	if err := f.meta(ctx); err != nil {
		return err
	}
	return f.Inner.CheckBucket(ctx, bucket)
}

// Stat implements Store.
func (f *Faulty) Stat(ctx context.Context, bucket, key string) (objstore.Object, error) {
	if err := f.meta(ctx); err != nil {
		return objstore.Object{}, err
	}
	return f.Inner.Stat(ctx, bucket, key)
}

// List implements Store.
func (f *Faulty) List(ctx context.Context, bucket, prefix, cont string, maxKeys int) (objstore.Page, error) {
	if err := f.meta(ctx); err != nil {
		return objstore.Page{}, err
	}
	return f.Inner.List(ctx, bucket, prefix, cont, maxKeys)
}

// GetRange implements Store.
func (f *Faulty) GetRange(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (io.ReadCloser, error) {
	k, frac := f.draw(true)
	if err := f.before(ctx, k, frac); err != nil {
		return nil, err
	}
	body, err := f.Inner.GetRange(ctx, bucket, key, off, n, v)
	if err != nil || k == FaultNone {
		return body, err
	}
	return faultBody(ctx, body, k, n, frac), nil
}

// faultBody breaks a body of n bytes with fault k, frac of the way in.
func faultBody(ctx context.Context, body io.ReadCloser, k FaultKind, n int64, frac float64) io.ReadCloser {
	// Where the body goes wrong: somewhere in [0, n).
	cut := int64(frac * float64(n))
	switch k {
	case FaultEarlyEOF:
		return &faultyBody{inner: body, left: cut, end: io.ErrUnexpectedEOF}
	case FaultShort:
		return &faultyBody{inner: body, left: cut, end: io.EOF}
	case FaultStallBody:
		return &faultyBody{inner: body, left: cut, stall: ctx}
	case FaultLong:
		return &faultyBody{inner: body, left: n, end: io.EOF, extra: 1 + int64(frac*4096)}
	}
	return body
}

// faultyBody passes left bytes of inner through, then ends with end (after
// extra bytes of 0xA5, for a long body), or blocks until stall is done.
type faultyBody struct {
	inner io.ReadCloser
	left  int64
	end   error
	extra int64
	stall context.Context
}

func (b *faultyBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.left > 0 {
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err := b.inner.Read(p)
		b.left -= int64(n)
		if err == io.EOF && b.left > 0 {
			// The inner body is shorter than the fault expected; pass its
			// answer on rather than invent bytes.
			return n, err
		}
		if err != nil && err != io.EOF {
			return n, err
		}
		return n, nil
	}
	if b.stall != nil {
		<-b.stall.Done()
		return 0, b.stall.Err()
	}
	if b.extra > 0 {
		c := int(min(int64(len(p)), b.extra))
		for i := range c {
			p[i] = 0xA5
		}
		b.extra -= int64(c)
		return c, nil
	}
	return 0, b.end
}

func (b *faultyBody) Close() error { return b.inner.Close() }

// SortedFaultCounts formats counts (from Counts) as "kind=n ..." in name
// order, for test logs.
func SortedFaultCounts(counts map[string]int64) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for i, n := range names {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", n, counts[n])
	}
	return s
}

// GetRaw implements RawGetter when Inner is one (ErrNoRaw otherwise, with
// nothing sent): the faults of GetRange, for a body handed over as its
// socket. A body that breaks, ends short or stalls fails where it would
// have ended; a long one is refused, as GetRaw refuses a reply with more
// bytes than it asked for.
func (f *Faulty) GetRaw(ctx context.Context, bucket, key string, off, n int64, v objstore.Version) (*objstore.RawBody, error) {
	g, ok := f.Inner.(objstore.RawGetter)
	if !ok {
		return nil, fmt.Errorf("%w: %T", objstore.ErrNoRaw, f.Inner)
	}
	f.mu.Lock()
	f.raws++
	f.mu.Unlock()
	k, frac := f.draw(true)
	if err := f.before(ctx, k, frac); err != nil {
		return nil, err
	}
	body, err := g.GetRaw(ctx, bucket, key, off, n, v)
	if err != nil || k == FaultNone {
		return body, err
	}
	cut := int64(frac * float64(n))
	switch k {
	case FaultEarlyEOF, FaultShort:
		// A socket's body has no end of its own: one that ends early is
		// a connection closed before its length.
		return relayRaw(body, n, cut, false)
	case FaultStallBody:
		return relayRaw(body, n, cut, true)
	case FaultLong:
		body.Close()
		return nil, fmt.Errorf("injected fault: get %s/%s: %w", bucket, key, objstore.ErrLongBody)
	}
	return body, nil
}

// relayRaw hands the reader, in place of inner (a body of n bytes), a body
// on a loopback connection of its own that carries inner's first cut bytes
// and then ends, or, for a stall, brings nothing more until the reader
// leaves: a real socket, which the reader splices or reads as it would the
// store's, failing where a connection that broke or stopped would. The
// reader's waits are bounded by inner's timeout.
func relayRaw(inner *objstore.RawBody, n, cut int64, stall bool) (*objstore.RawBody, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		inner.Close()
		return nil, err
	}
	defer ln.Close()
	client, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		inner.Close()
		return nil, err
	}
	server, err := ln.AcceptTCP()
	if err != nil {
		client.Close()
		inner.Close()
		return nil, err
	}
	go func() {
		defer inner.Close()
		defer server.Close()
		buf := make([]byte, 256<<10)
		for left := cut; left > 0; {
			k := min(left, int64(len(buf)))
			if inner.ReadFull(buf[:k]) != nil {
				return
			}
			if _, err := server.Write(buf[:k]); err != nil {
				return
			}
			left -= k
		}
		if stall {
			io.Copy(io.Discard, server) // until the reader closes its end
		}
	}()
	return objstore.NewRawBody(client, nil, n, inner.Timeout())
}

// GetRangeRDMA implements RDMAGetter when Inner is one (ErrNoRDMAGetter
// otherwise, with nothing sent): the faults that strike before a reply, and
// those of a body on a reply that carries the object's bytes (a decline or
// an ignored token). A reply served over RDMA has no body for a body fault
// to strike; it passes unchanged, and the fault is not counted.
func (f *Faulty) GetRangeRDMA(ctx context.Context, bucket, key string, off, n int64, v objstore.Version, token string) (objstore.RDMAReply, error) {
	g, ok := f.Inner.(objstore.RDMAGetter)
	if !ok {
		return objstore.RDMAReply{}, fmt.Errorf("%w: %T", objstore.ErrNoRDMAGetter, f.Inner)
	}
	k, frac := f.pick(true)
	if k == FaultError || k == FaultStallResponse {
		f.count(k)
		if err := f.before(ctx, k, frac); err != nil {
			return objstore.RDMAReply{}, err
		}
	}
	rep, err := g.GetRangeRDMA(ctx, bucket, key, off, n, v, token)
	if err != nil || rep.Body == nil || k == FaultNone || k == FaultError || k == FaultStallResponse {
		return rep, err
	}
	f.count(k)
	rep.Body = faultBody(ctx, rep.Body, k, n, frac)
	return rep, nil
}
