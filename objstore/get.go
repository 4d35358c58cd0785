package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"
)

// Range is what one GET asks for: bytes [Off, Off+N) of Bucket/Key, of
// Version only.
type Range struct {
	Bucket, Key string
	Off, N      int64
	Version     Version
}

// Getter is the one lifecycle of a GET that every reader uses: the request
// pinned to a version, its reply's headers and each wait for its body's
// next byte bounded by ReadTimeout, the body checked to hold exactly the
// bytes asked for, and (Fetch) the retries with their pauses, each asking
// only for the bytes not yet delivered. Readers keep only where the bytes
// go. It is safe for concurrent use.
type Getter struct {
	Store Store
	// ReadTimeout bounds the wait for a reply's headers and for each next
	// byte of its body; 0: no bound but the context's. A timeout is
	// retryable.
	ReadTimeout time.Duration
	// Retries is how many more attempts a transient failure earns.
	Retries int
	// OnRetry is told of each attempt after the first (metrics).
	OnRetry func()
	// OnChanged is told when a Fetch ends because the object is no longer
	// the version asked for (ErrChanged): the reader's cue to drop what it
	// keeps about the name, so that the next lookup asks the store.
	OnChanged func(bucket, key string)
	// Log, when set, is told once that the store hands over no raw bodies.
	Log *slog.Logger

	noRaw atomic.Bool // the store refused a raw GET (HTTPS, a proxy)
}

// CanRaw says whether the store may hand over bodies as sockets: it is a
// RawGetter and has not refused one yet.
func (g *Getter) CanRaw() bool {
	_, ok := g.Store.(RawGetter)
	return ok && !g.noRaw.Load()
}

// Body is the reply of one attempt: the range's bytes, read in order. It is
// not safe for concurrent use, except Close beside nothing else.
type Body struct {
	ctx    context.Context
	cancel context.CancelFunc
	left   int64
	// One of the two: a body on a connection of its own, whose waits its
	// own timeout bounds; or the HTTP client's, watched by guard.
	raw   *RawBody
	rc    io.ReadCloser
	guard *StallGuard
	// unabort stops the abort of raw that the context's end sets off.
	unabort func() bool
}

// Open sends one GET of r and returns its body once the reply's headers
// have come, within ReadTimeout. raw asks for the body on a connection of
// its own (RawGetter) where the store can hand one over; otherwise, and
// from the first time the store says it cannot (ErrNoRaw), the HTTP
// client's body. Ending ctx ends the body's reads.
func (g *Getter) Open(ctx context.Context, r Range, raw bool) (*Body, error) {
	ctx, cancel := context.WithCancel(ctx)
	guard := &StallGuard{Timeout: g.ReadTimeout}
	guard.Start(cancel)
	if raw && g.CanRaw() {
		rb, err := g.Store.(RawGetter).GetRaw(ctx, r.Bucket, r.Key, r.Off, r.N, r.Version)
		guard.Stop()
		switch {
		case err == nil:
			// Each wait for the body's next byte is bounded by the
			// socket's deadline from here on, and the context's end
			// breaks a wait under way.
			rb.SetTimeout(g.ReadTimeout)
			return &Body{ctx: ctx, cancel: cancel, left: r.N, raw: rb,
				unabort: context.AfterFunc(ctx, rb.Abort)}, nil
		case !errors.Is(err, ErrNoRaw):
			cancel()
			return nil, guard.Err(err)
		}
		if !g.noRaw.Swap(true) && g.Log != nil {
			g.Log.Info("the store hands over no raw GET bodies; reading them through the HTTP client", "err", err)
		}
		guard.Start(cancel)
	}
	rc, err := g.Store.GetRange(ctx, r.Bucket, r.Key, r.Off, r.N, r.Version)
	guard.Stop()
	if err != nil {
		cancel()
		return nil, guard.Err(err)
	}
	return &Body{ctx: ctx, cancel: cancel, left: r.N, rc: rc, guard: guard}, nil
}

// Raw is the body's socket, for a reader that splices it; nil for the
// HTTP client's bodies.
func (b *Body) Raw() *RawBody { return b.raw }

// Left is how many of the range's bytes have not been read.
func (b *Body) Left() int64 {
	if b.raw != nil {
		return b.raw.Left()
	}
	return b.left
}

// ReadFull reads the next len(p) bytes of the body into p. The time
// between reads is the reader's own: only a read's waits count as a stall.
// A body that ends early fails with io.ErrUnexpectedEOF, one that stalls
// with a timeout (both retryable), one whose context ended with its error;
// a body longer than its range fails its last read with ErrLongBody, so no
// byte of a reply that was not the range is trusted.
func (b *Body) ReadFull(p []byte) error {
	if int64(len(p)) > b.Left() {
		return fmt.Errorf("read of %d bytes from a body with %d left", len(p), b.Left())
	}
	if b.raw != nil {
		err := b.raw.ReadFull(p)
		if err != nil && b.ctx.Err() != nil {
			return b.ctx.Err() // aborted: the caller's reason, not the socket's
		}
		return err
	}
	b.guard.Touch()
	defer b.guard.Stop()
	if err := b.guard.ReadFull(b.ctx, b.rc, p); err != nil {
		return b.guard.Err(err)
	}
	b.left -= int64(len(p))
	if b.left == 0 {
		return CheckEnd(b.rc)
	}
	return nil
}

// Read is ReadFull of up to len(p) bytes, and io.EOF once the range is
// read: for readers that take an io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	k := int(min(int64(len(p)), b.Left()))
	if k == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	if err := b.ReadFull(p[:k]); err != nil {
		return 0, err
	}
	return k, nil
}

// Close ends the GET.
func (b *Body) Close() error {
	var err error
	if b.raw != nil {
		b.unabort()
		err = b.raw.Close()
	} else {
		err = b.rc.Close()
	}
	b.cancel()
	return err
}

// Fetch reads r with as many attempts as Retries allows, the first sent at
// once and each other after Backoff (unless ctx ends first). deliver is
// handed each attempt's body, which starts at pos (r.Off first, then the
// first byte not yet delivered), and says how many bytes from pos it
// delivered, reading them with ReadFull; its error ends the attempt. failed
// is an attempt already spent on r (another reader's GET that broke), which
// counts as the first, or nil. raw is Open's. A Fetch that ends with
// ErrChanged tells OnChanged.
func (g *Getter) Fetch(ctx context.Context, r Range, raw bool, failed error, deliver func(b *Body, pos int64) (int64, error)) error {
	pos, end := r.Off, r.Off+r.N
	err, attempt := failed, 0
	if failed != nil {
		attempt = 1
	}
	for ; pos < end; attempt++ {
		if attempt > 0 {
			if attempt > g.Retries || !IsRetryable(err) {
				break
			}
			if g.OnRetry != nil {
				g.OnRetry()
			}
			if err = sleep(ctx, Backoff(attempt)); err != nil {
				break
			}
		}
		rest := r
		rest.Off, rest.N = pos, end-pos
		var b *Body
		if b, err = g.Open(ctx, rest, raw); err == nil {
			var k int64
			k, err = deliver(b, pos)
			b.Close()
			pos += k
			if err == nil && pos < end {
				err = fmt.Errorf("get %s/%s: %d bytes of %d delivered", r.Bucket, r.Key, pos-r.Off, r.N)
			}
		}
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, ErrChanged) && g.OnChanged != nil {
		g.OnChanged(r.Bucket, r.Key)
	}
	return err
}

// OpenRDMA sends one S3-over-RDMA GET of r with token through rg (the
// store, or a fabric in front of it) and says how the server answered,
// within ReadTimeout: the server answers once the bytes are in place, so a
// server that stalls holds the reply. A reply that brings the bytes in its
// body instead (a decline, an ignored token) has them as a *Body in Body,
// read as Open's bodies are.
func (g *Getter) OpenRDMA(ctx context.Context, rg RDMAGetter, r Range, token string) (RDMAReply, error) {
	ctx, cancel := context.WithCancel(ctx)
	guard := &StallGuard{Timeout: g.ReadTimeout}
	guard.Start(cancel)
	rep, err := rg.GetRangeRDMA(ctx, r.Bucket, r.Key, r.Off, r.N, r.Version, token)
	guard.Stop()
	if err != nil || rep.Body == nil {
		cancel()
		return rep, guard.Err(err)
	}
	rep.Body = &Body{ctx: ctx, cancel: cancel, left: r.N, rc: rep.Body, guard: guard}
	return rep, nil
}

// sleep pauses for d unless ctx ends first, which it then returns.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
