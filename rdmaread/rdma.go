package rdmaread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/cufile"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// RDMAConfig turns on the RDMA path.
type RDMAConfig struct {
	// Minter mints tokens for buffers the daemon imported; nil leaves only
	// tokens callers mint themselves.
	Minter mint.Minter
	// DeclineIsError makes every declined transfer fail (ECANCELED) instead
	// of falling back to HTTP, for users who would rather fail than run slowly.
	DeclineIsError bool
	// Getter sends the RDMA GETs; nil uses the engine's store. The loopback
	// fabric answers them on an endpoint of its own.
	Getter objstore.RDMAGetter
	// Putter sends the RDMA UploadParts of GPU writes; nil uses Getter
	// when it is a putter too, else the engine's store, else writes never
	// go over RDMA.
	Putter objstore.RDMAPutter
}

// ErrDeclined is returned instead of an HTTP fallback when declines are errors.
var ErrDeclined = errors.New("RDMA transfer declined and fallback to HTTP is off")

type rdmaPath struct {
	getter         objstore.RDMAGetter
	putter         objstore.RDMAPutter // nil: writes go through pinned staging only
	minter         mint.Minter
	tokens         *mint.TokenCache // nil without a minter
	declineIsError bool
	summary        declineSummary
}

// EnableRDMA switches the engine to try RDMA first. The store must speak
// S3 over RDMA (objstore.RDMAGetter).
func (e *Engine) EnableRDMA(cfg RDMAConfig) error {
	g := cfg.Getter
	if g == nil {
		var ok bool
		if g, ok = e.store.(objstore.RDMAGetter); !ok {
			return objstore.ErrNoRDMAGetter
		}
	}
	p := &rdmaPath{getter: g, putter: cfg.Putter, minter: cfg.Minter, declineIsError: cfg.DeclineIsError}
	if p.putter == nil {
		if pt, ok := g.(objstore.RDMAPutter); ok {
			p.putter = pt
		} else if pt, ok := e.store.(objstore.RDMAPutter); ok {
			p.putter = pt
		}
	}
	if e.rdma != nil {
		p.summary.last = e.rdma.summary.last
	}
	if cfg.Minter != nil {
		p.tokens = mint.NewTokenCache(cfg.Minter)
		// Registrations go before the mapping they name.
		e.imports.OnClose(func(a cufile.Allocation) {
			if err := p.tokens.ReleaseAllocation(a); err != nil {
				e.log.Warn("releasing RDMA registrations", "err", err)
			}
		})
	}
	e.rdma = p
	return nil
}

// RDMAInfo names the minter and fabric for the caps attribute.
func (e *Engine) RDMAInfo() (minter, fabric string) {
	if e.rdma == nil || e.rdma.minter == nil {
		return "none", "none"
	}
	return e.rdma.minter.Name(), e.rdma.minter.Fabric()
}

// wantsRDMA says whether this read asks for RDMA at all: reads that never
// did are not declines.
func (e *Engine) wantsRDMA(r Request) bool {
	if r.Flags&abi.FlagHTTPOnly != 0 || e.rdma == nil {
		return false
	}
	// A caller's own token is forwarded even when the daemon mints none.
	return r.Token != "" || e.rdma.tokens != nil
}

// partResult is what one part of a read delivered.
type partResult struct {
	rdma, http int64
	decline    abi.Decline
	err        error
}

// readRDMA sends the range as parts of at most one server operation, at
// most Streams at a time, each first over RDMA and, when declined, over
// HTTP into the same place.
func (e *Engine) readRDMA(ctx context.Context, r Request, n int64, alloc cufile.Allocation) (Result, error) {
	parts := rdmatoken.SplitRange(r.Offset, n, e.transferSize(n, e.reading.Load()))
	results := make([]partResult, len(parts))
	sem := make(chan struct{}, e.cfg.Streams)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i].err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			dst := r.DstOffset + uint64(p.Off-r.Offset)
			results[i] = e.rdmaPart(ctx, r, p, alloc, dst)
			if results[i].err != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	var res Result
	for _, pr := range results {
		if pr.err != nil {
			return res, pr.err
		}
		res.RDMABytes += pr.rdma
		res.HTTPBytes += pr.http
		if res.Decline == abi.DeclineNone {
			res.Decline = pr.decline
		}
	}
	res.Bytes = res.RDMABytes + res.HTTPBytes
	if res.Bytes != n {
		return Result{}, fmt.Errorf("rdmaread: %d of %d bytes carried", res.Bytes, n)
	}
	res.Transport = abi.TransportRDMA
	if res.HTTPBytes > 0 {
		res.Transport = abi.TransportHTTP
	}
	return res, nil
}

// transferSize is the largest RDMA transfer of a read of n bytes while
// reading reads are in flight: the read's HTTP part, at most RDMAChunk.
func (e *Engine) transferSize(n, reading int64) int64 {
	return min(e.cfg.RDMAChunk, e.partSize(n, reading))
}

// rdmaPart carries one part. Answers about the object (gone, changed,
// denied) are errors; anything else the fabric or server says is a decline
// with a reason, and the bytes go over HTTP unless declines are errors.
func (e *Engine) rdmaPart(ctx context.Context, r Request, p rdmatoken.Part, alloc cufile.Allocation, dst uint64) partResult {
	token := r.Token
	var lease *mint.Lease
	var err error
	if token == "" {
		lease, err = e.rdma.tokens.Acquire(alloc, dst, uint64(p.Len))
		if err == nil {
			token, err = lease.Token()
			if err != nil {
				lease.Release()
				lease = nil
			}
		}
	}
	var rep objstore.RDMAReply
	if err == nil {
		var done func()
		if done, err = e.sched.Acquire(ctx, r.Owner, p.Len); err == nil {
			rep, err = e.transfer(ctx, r, p, token)
			done()
		}
	}
	if lease != nil {
		defer lease.Release()
	}
	if isObjectAnswer(err) || ctx.Err() != nil {
		if rep.Body != nil {
			rep.Body.Close()
		}
		if err == nil || !isObjectAnswer(err) {
			// The caller gave up: whatever the server said, this part
			// is not done.
			err = ctx.Err()
		}
		return partResult{err: err}
	}
	decline := DeclineFor(rep, err)
	if decline == abi.DeclineNone {
		return partResult{rdma: p.Len}
	}
	if lease != nil && (decline == abi.DeclineRDMAError || decline == abi.DeclineTimeout) {
		lease.ReportFailure(token)
	}
	served := int64(0)
	if rep.Outcome == objstore.RDMAShortTransfer {
		served = min(max(rep.Bytes, 0), p.Len)
	}
	rest := p.Len - served
	e.noteDecline(r, p, decline, err)
	if rep.Body != nil {
		defer rep.Body.Close()
	}
	if e.rdma.declineIsError || r.Flags&(abi.FlagDeclineIsError|abi.FlagRDMAOnly) != 0 {
		return partResult{err: fmt.Errorf("%w: %s", ErrDeclined, decline)}
	}
	if r.Handle == (cufile.Handle{}) && r.Token != "" {
		// The caller minted the token and gave no buffer we can write
		// through: it falls back itself.
		return partResult{rdma: served, decline: decline}
	}
	if rep.Body != nil {
		// The server ignored the token and sent the bytes: use them.
		if err := e.stageBody(ctx, r.Device, rep.Body, p.Len, alloc, dst); err != nil {
			return partResult{err: err}
		}
		e.m.GPUDeclinedBytes.WithLabelValues(decline.String()).Add(float64(p.Len))
		return partResult{http: p.Len, decline: decline}
	}
	sub := r
	sub.Offset, sub.DstOffset = p.Off+served, dst+uint64(served)
	if _, err := e.readHTTP(ctx, sub, rest, alloc); err != nil {
		return partResult{err: err}
	}
	// Declined bytes are the ones that went over HTTP instead.
	e.m.GPUDeclinedBytes.WithLabelValues(decline.String()).Add(float64(rest))
	return partResult{rdma: served, http: rest, decline: decline}
}

// transfer sends one RDMA GET (objstore.Getter.OpenRDMA): a reply that has
// not come within the read timeout is given up as a timeout, and its bytes
// go over HTTP. A body the reply brings (a server that ignored the token)
// is read as every GET's body is.
func (e *Engine) transfer(ctx context.Context, r Request, p rdmatoken.Part, token string) (objstore.RDMAReply, error) {
	return e.gets.OpenRDMA(ctx, e.rdma.getter, objstore.Range{Bucket: r.Bucket, Key: r.Key, Off: p.Off, N: p.Len, Version: r.Version}, token)
}

// isObjectAnswer says whether err is the server's answer about the object
// itself, which no transport can change.
func isObjectAnswer(err error) bool {
	return errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrNoBucket) ||
		errors.Is(err, objstore.ErrChanged) || errors.Is(err, objstore.ErrAccessDenied)
}

// stageBody copies n bytes of body into the allocation through the pinned
// ring, one slot at a time.
func (e *Engine) stageBody(ctx context.Context, device int, body io.Reader, n int64, alloc cufile.Allocation, dst uint64) error {
	stager, err := e.stager(device)
	if err != nil {
		return err
	}
	if _, err := cufile.CopyFrom(ctx, stager, body, n, alloc, dst); err != nil {
		return fmt.Errorf("body of an ignored-token reply: %w", err)
	}
	return nil
}

// noteDecline counts a decline, logs it at debug, and summarises declines
// at info at most once a minute.
func (e *Engine) noteDecline(r Request, p rdmatoken.Part, d abi.Decline, cause error) {
	e.m.GPUDeclined.WithLabelValues(d.String()).Inc()
	e.log.Debug("RDMA transfer declined", "bucket", r.Bucket, "key", r.Key, "offset", p.Off, "length", p.Len,
		"reason", d.String(), "cause", cause)
	if counts, ok := e.rdma.summary.add(d, time.Now()); ok {
		e.log.Info("RDMA transfers declined in the last minute (bytes went over HTTP)", "by_reason", counts)
	}
}

// declineSummary collects declines between info-level summaries.
type declineSummary struct {
	mu     sync.Mutex
	last   time.Time
	counts map[string]int
}

// add counts d; when a minute has passed since the last summary it hands
// back the counts to log and starts again.
func (s *declineSummary) add(d abi.Decline, now time.Time) (map[string]int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.counts[d.String()]++
	if now.Sub(s.last) < time.Minute {
		return nil, false
	}
	out := s.counts
	s.counts, s.last = map[string]int{}, now
	return out, true
}

// DeclineFor is the decline reason for an RDMA attempt that did not serve
// every byte: a minting error, a failed GET with a token, or the GET's
// outcome. Errors that are answers about the object (objstore.ErrNotFound,
// ErrChanged, ErrAccessDenied, ErrNoBucket) are not declines: the engine
// returns them instead of falling back, so check those first.
func DeclineFor(rep objstore.RDMAReply, err error) abi.Decline {
	switch {
	case err == nil:
	case errors.Is(err, mint.ErrTooLarge):
		return abi.DeclineTooLarge
	case errors.Is(err, mint.ErrNoMinter):
		return abi.DeclineRDMAUnavailable
	case errors.Is(err, mint.ErrRegistrationFailed):
		return abi.DeclineRegistrationFailed
	case errors.Is(err, objstore.ErrTokenRejected):
		return abi.DeclineTokenRejected
	case errors.Is(err, context.DeadlineExceeded):
		return abi.DeclineTimeout
	default:
		return abi.DeclineRDMAError
	}
	switch rep.Outcome {
	case objstore.RDMADeclined501:
		return abi.DeclineServer501
	case objstore.RDMATokenIgnored:
		return abi.DeclineTokenIgnored
	case objstore.RDMAShortTransfer:
		return abi.DeclineShortTransfer
	}
	return abi.DeclineNone
}
